"""Finding a model's context window when litellm's model map does not list it.

The input budget is the window minus the output reserve and a margin (`ContextPolicy`);
with no window it falls back to 64,000 tokens, which overflows an 8k local model and wastes
most of a 128k one. litellm's map knows the hosted models; a self-hosted one
(``openai/<name>`` at an ``api_base``) is usually unknown to it, but the server knows:

- vLLM lists ``max_model_len`` for each model in ``GET /v1/models``;
- llama.cpp's server reports ``default_generation_settings.n_ctx`` in ``GET /props``;
- Ollama reports ``model_info["<arch>.context_length"]`` (and a ``num_ctx`` parameter
  when the Modelfile sets one) in ``POST /api/show``;
- LM Studio and some gateways list ``context_length`` / ``max_context_length`` per model.

`server_window` asks those, once per (api_base, model) and process, each with a short
timeout, and caches the answer — including "no answer", so a server without metadata is
asked once. It blocks, so `discover_window` runs it in a worker thread: the event loop is
never held up, and concurrent first requests wait for one probe instead of sending many.

A provider's overflow error often states the window ("maximum context length is 8192
tokens"); `window_from_text` reads it and `remember_window` keeps it for the model and base
URL, so the retry and every later request use it. A remembered number wins over the
server's metadata and litellm's map: it is what the server enforces.

**Kept for a while, not forever.** A server behind one URL can be restarted with another
model length, so every window learned or discovered here is trusted for `WINDOW_TTL_S`
(10 minutes; ``HARNESS_WINDOW_TTL_S`` sets it at import) and then asked again; an overflow
error that states a window replaces it at once, and one that states none drops the
discovered answer (`forget_window`), so the next request asks the server again.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Final

import anyio.to_thread
import msgspec

__all__ = [
    "DISCOVERY_TIMEOUT_S",
    "WINDOW_TTL_S",
    "KnownWindow",
    "discover_window",
    "forget_window",
    "forget_windows",
    "known_window",
    "remember_window",
    "server_window",
    "window_from_text",
]

DISCOVERY_TIMEOUT_S: Final = 2.0
"""Seconds one metadata request may take (a probe asks at most three endpoints)."""
WINDOW_TTL_S: Final = float(os.environ.get("HARNESS_WINDOW_TTL_S") or 600.0)
"""Seconds a learned or discovered window is trusted before the server is asked again."""


class KnownWindow(msgspec.Struct, frozen=True, kw_only=True):
    """A model's context window and where it was learned."""

    tokens: int
    """The window in tokens (input and output together)."""
    source: str
    """``overflow_error``, ``server:vllm``, ``server:llama.cpp``, ``server:ollama`` …"""
    at: float = 0.0
    """When it was learned (``time.monotonic()``): it expires `WINDOW_TTL_S` later."""


# ------------------------------------------------------------------ overflow wordings
_WINDOW_PATTERNS: Final[tuple[str, ...]] = (
    r"maximum context length is ([\d,]+)",  # OpenAI, vLLM, DeepSeek, OpenRouter
    r"([\d,]+) maximum context length",  # Mistral
    r"tokens > ([\d,]+) maximum",  # Anthropic
    r"exceed context limit: \d+ \+ \d+ > ([\d,]+)",  # Anthropic input + max_tokens
    r"maximum number of tokens allowed \(([\d,]+)\)",  # Gemini
    r"maximum model length of ([\d,]+)",  # vLLM decoder prompt
    r"exceeds (?:the )?limit of ([\d,]+)",  # vLLM "Input prompt … exceeds limit of"
    r"available context size \(([\d,]+) tokens\)",  # llama.cpp
    r'"n_ctx":\s*(\d+)',  # llama.cpp's error body
    r"context length of only ([\d,]+) tokens",  # LM Studio
    r"while limit is ([\d,]+)",  # Cerebras
    r"maximum prompt length is ([\d,]+)",  # xAI
    r"model'?s? context length \(([\d,]+) tokens\)",  # Together
    r"model token limit: ([\d,]+)",  # Moonshot
    r"only supports up to ([\d,]+)",  # Vertex AI
    r"tokens \+ `?max_new_tokens`? must be <= ([\d,]+)",  # TGI
    r"must have less than ([\d,]+) tokens",  # TGI
)
_WINDOW: Final = re.compile("|".join(f"(?:{p})" for p in _WINDOW_PATTERNS), re.IGNORECASE)
_SMALLEST: Final = 256
"""A number below this in an overflow text is not a window (a count of excess tokens)."""


def window_from_text(text: str) -> int | None:
    """Return the context window an overflow error's ``text`` states, or ``None``.

    Reads the wordings of OpenAI, vLLM, llama.cpp, LM Studio, Anthropic, Gemini, Mistral,
    TGI and others. Ollama's "exceeded max context length by N tokens" states the excess,
    not the window, and gives ``None``.
    """
    for match in _WINDOW.finditer(text):
        raw = next((g for g in match.groups() if g), None)
        if raw is None:
            continue
        value = int(raw.replace(",", ""))
        if value >= _SMALLEST:
            return value
    return None


# ------------------------------------------------------------------ the process cache
_lock = threading.Lock()
_learned: dict[tuple[str, str], KnownWindow] = {}
"""Windows read from overflow errors, by (api_base, model)."""
_asked: dict[tuple[str, str], KnownWindow | None] = {}
"""Server metadata answers (``None``: the server says nothing), by (api_base, model)."""
_asked_at: dict[tuple[str, str], float] = {}
"""When a server said nothing (a ``None`` in `_asked` has no time of its own)."""
_probing: dict[tuple[str, str], threading.Lock] = {}


def _key(model: str, api_base: str | None) -> tuple[str, str]:
    return ((api_base or "").rstrip("/"), model)


def _expire(key: tuple[str, str], ttl_s: float) -> None:
    """Drop ``key``'s answers older than ``ttl_s`` (call with ``_lock`` held)."""
    oldest = time.monotonic() - ttl_s
    learned = _learned.get(key)
    if learned is not None and learned.at < oldest:
        del _learned[key]
    if key in _asked:
        asked = _asked[key]
        if (asked.at if asked is not None else _asked_at.get(key, 0.0)) < oldest:
            del _asked[key]


def remember_window(model: str, api_base: str | None, tokens: int, *, source: str) -> None:
    """Keep ``tokens`` as the window of ``model`` at ``api_base`` (for `WINDOW_TTL_S`)."""
    if tokens > 0:
        with _lock:
            _learned[_key(model, api_base)] = KnownWindow(
                tokens=tokens, source=source, at=time.monotonic()
            )


def known_window(
    model: str, api_base: str | None, *, ttl_s: float = WINDOW_TTL_S
) -> KnownWindow | None:
    """Return the window learned (an overflow error, then server metadata), or ``None``.

    Answers older than ``ttl_s`` seconds are dropped. Never does I/O.
    """
    key = _key(model, api_base)
    with _lock:
        _expire(key, ttl_s)
        return _learned.get(key) or _asked.get(key)


def forget_window(model: str, api_base: str | None) -> None:
    """Forget what the server said about ``model``'s window (it overflowed without a number)."""
    with _lock:
        _asked.pop(_key(model, api_base), None)


def forget_windows() -> None:
    """Forget every learned and discovered window (for tests and long-lived processes)."""
    with _lock:
        _learned.clear()
        _asked.clear()
        _asked_at.clear()
        _probing.clear()


async def discover_window(
    model: str,
    api_base: str,
    *,
    served_name: str | None = None,
    api_key: str | None = None,
    request_timeout_s: float = DISCOVERY_TIMEOUT_S,
    ttl_s: float = WINDOW_TTL_S,
) -> KnownWindow | None:
    """Return the window `server_window` finds, asked in a worker thread (cached ``ttl_s``).

    ``request_timeout_s`` bounds each metadata request (not the wait for a probe that
    another task already started).
    """
    key = _key(model, api_base)
    with _lock:
        _expire(key, ttl_s)
        if key in _learned:
            return _learned[key]
        if key in _asked:
            return _asked[key]
    return await anyio.to_thread.run_sync(
        lambda: server_window(
            model,
            api_base,
            served_name=served_name,
            api_key=api_key,
            timeout=request_timeout_s,
        ),
        abandon_on_cancel=True,
    )


def server_window(
    model: str,
    api_base: str,
    *,
    served_name: str | None = None,
    api_key: str | None = None,
    timeout: float = DISCOVERY_TIMEOUT_S,
) -> KnownWindow | None:
    """Ask the server at ``api_base`` for ``model``'s window, once per process; blocks.

    Tries ``GET {api_base}/models``, ``GET {root}/props`` and ``POST {root}/api/show``
    (``root`` is ``api_base`` without a trailing ``/v1``), each with ``timeout``; any
    failure (404, refused connection, odd JSON) moves on to the next. The answer, found
    or not, is cached.

    Args:
        model: the litellm model name (the cache key).
        api_base: the server's base URL.
        served_name: the name the server knows the model by (``model`` without its
            ``provider/`` prefix); defaults to that.
        api_key: sent as a bearer token when given.
        timeout: seconds per metadata request.
    """
    key = _key(model, api_base)
    with _lock:
        probe_lock = _probing.setdefault(key, threading.Lock())
    with probe_lock:
        with _lock:
            if key in _asked:
                return _asked[key]
        name = served_name or model.split("/", 1)[-1]
        found = _probe(key[0], name, api_key=api_key, timeout=timeout)
        now = time.monotonic()
        if found is not None:
            found = msgspec.structs.replace(found, at=now)
        with _lock:
            _asked[key] = found
            _asked_at[key] = now
        return found


def _probe(base: str, name: str, *, api_key: str | None, timeout: float) -> KnownWindow | None:
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    models = _get_json(f"{base}/models", api_key=api_key, timeout=timeout)
    found = _from_model_list(models, name)
    if found is not None:
        return found
    props = _get_json(f"{root}/props", api_key=api_key, timeout=timeout)
    n_ctx = _positive(_dig(props, "default_generation_settings", "n_ctx")) or _positive(
        _dig(props, "n_ctx")
    )
    if n_ctx is not None:
        return KnownWindow(tokens=n_ctx, source="server:llama.cpp")
    show = _get_json(f"{root}/api/show", api_key=api_key, timeout=timeout, post={"model": name})
    found = _from_ollama_show(show)
    if found is not None:
        return found
    return None


_LIST_KEYS: Final = (
    ("max_model_len", "server:vllm"),
    ("loaded_context_length", "server:lm_studio"),
    ("max_context_length", "server:lm_studio"),
    ("context_length", "server:models"),
    ("context_window", "server:models"),
)


def _from_model_list(listing: Any, name: str) -> KnownWindow | None:
    data = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(data, list):
        return None
    entries = [e for e in data if isinstance(e, dict)]
    chosen = [e for e in entries if e.get("id") == name] or (entries if len(entries) == 1 else [])
    for entry in chosen:
        for field, source in _LIST_KEYS:
            value = _positive(entry.get(field))
            if value is not None:
                return KnownWindow(tokens=value, source=source)
    return None


_NUM_CTX: Final = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _from_ollama_show(show: Any) -> KnownWindow | None:
    if not isinstance(show, dict):
        return None
    parameters = show.get("parameters")
    if isinstance(parameters, str) and (match := _NUM_CTX.search(parameters)):
        # The window Ollama runs the model with, when the Modelfile sets it.
        return KnownWindow(tokens=int(match.group(1)), source="server:ollama")
    info = show.get("model_info")
    if isinstance(info, dict):
        for field, value in info.items():
            if isinstance(field, str) and field.endswith(".context_length"):
                tokens = _positive(value)
                if tokens is not None:
                    return KnownWindow(tokens=tokens, source="server:ollama")
    return None


def _get_json(
    url: str, *, api_key: str | None, timeout: float, post: dict[str, Any] | None = None
) -> Any:
    headers = {"Accept": "application/json"}
    data = None
    if post is not None:
        data = json.dumps(post).encode()
        headers["Content-Type"] = "application/json"
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return json.loads(answer.read(1_000_000))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _dig(value: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
