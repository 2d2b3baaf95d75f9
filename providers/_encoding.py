"""Checks that run before a request leaves: every string encodes as UTF-8, settings are ours.

A lone surrogate (half of a UTF-16 pair) cannot be encoded; litellm would fail deep inside
the HTTP client with an error that looks like a server fault. These checks name the message
and the part that holds it, with ``status=None`` and ``sent=False``: nothing was sent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from harness.errors import ConfigurationError, ProviderBadRequest

RESERVED = frozenset({"model", "messages", "tools", "stream", "api_key", "api_base"})
"""Keys the client sets itself; settings may not override them."""


def check_encodable(kwargs: Mapping[str, Any], *, provider: str, model: str) -> None:
    """Refuse a request whose text cannot be encoded as UTF-8, before anything is sent.

    Raises:
        ProviderBadRequest: with ``status=None``, naming the message and part that holds
            the character, and what to do.
    """
    try:
        msgspec.json.encode((kwargs.get("messages"), kwargs.get("tools")))
    except UnicodeEncodeError as exc:
        where, char = _first_unencodable(kwargs)
        who = f"{provider or 'the provider'} (model {model!r})"
        raise ProviderBadRequest(
            f"{who}: {where} holds {char!r}, which cannot be encoded as UTF-8 (a lone "
            "surrogate, usually from bytes decoded with errors='surrogateescape' or a string "
            "cut inside a surrogate pair), so nothing was sent. Replace it before sending, "
            "e.g. text.encode('utf-8', 'replace').decode(); retrying will not help.",
            provider=provider,
            status=None,
            model=model,
            detail=where,
            cause=type(exc).__name__,
            sent=False,
        ) from exc
    except (TypeError, ValueError):
        return  # a value msgspec cannot encode: litellm serialises it its own way


def _first_unencodable(kwargs: Mapping[str, Any]) -> tuple[str, str]:
    """Return where the first string that cannot be encoded is, and the character."""
    messages = kwargs.get("messages") or []
    for index, message in enumerate(messages):
        for path, text in _strings(message, ""):
            char = _bad_char(text)
            if char is not None:
                role = message.get("role") if isinstance(message, Mapping) else None
                return f"message {index} of {len(messages)} (role {role!r}) at {path}", char
    for index, tool in enumerate(kwargs.get("tools") or []):
        for path, text in _strings(tool, ""):
            char = _bad_char(text)
            if char is not None:
                return f"tool schema {index} at {path}", char
    return "the request", "?"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """Yield ``(path, string)`` for every key and string value in a JSON-like value."""
    if isinstance(value, str):
        yield path or "content", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(key, str):
                yield f"{sub} (the key)", key
            yield from _strings(item, sub)
    elif isinstance(value, list | tuple):
        for position, item in enumerate(value):
            yield from _strings(item, f"{path}[{position}]")


def _bad_char(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


# ------------------------------------------------------------------------ conversion
def check_settings(settings: Mapping[str, Any], *, where: str) -> None:
    clash = sorted(RESERVED & set(settings))
    if clash:
        raise ConfigurationError(
            f"{where} may not set {', '.join(clash)}: the client sets these itself "
            "(give api_base/api_key to LiteLLMClient, tools to the request)"
        )
