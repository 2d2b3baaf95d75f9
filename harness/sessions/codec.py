"""Middleware state in the store, and back.

``AgentState.extensions`` holds frozen msgspec values (TaskState's `TodoList`, `PlanMode`
…) and JSON values. Each is stored as JSON-ready builtins with the name of its type (for a
struct), so a stored session stays readable; on load the builtins come back as they are,
and `harness.state.AgentState.get` turns a value into its `harness.state.StateKey`'s type
on first read. The codec knows no owner's types.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from harness.errors import ConfigurationError
from harness.manifest import enc_hook

_TYPE: Final = "type"
_VALUE: Final = "value"


def type_name(cls: type) -> str:
    """Return the name a value's type is stored under."""
    return f"{cls.__module__}.{cls.__qualname__}"


def encode_extensions(extensions: dict[str, Any]) -> dict[str, Any]:
    """Return ``extensions`` as JSON-ready builtins, each value tagged with its type.

    Raises:
        ConfigurationError: a value cannot be stored as JSON (say which key).
    """
    out: dict[str, Any] = {}
    for key, value in extensions.items():
        try:
            plain = msgspec.to_builtins(value, enc_hook=enc_hook)  # a manifest's items too
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"AgentState.extensions[{key!r}] holds {type(value).__name__}, which cannot be "
                f"stored ({exc}); keep structured state as msgspec structs or JSON values"
            ) from None
        entry: dict[str, Any] = {_VALUE: plain}
        if isinstance(value, msgspec.Struct):
            entry[_TYPE] = type_name(type(value))
        out[key] = entry
    return out


def decode_extensions(stored: dict[str, Any]) -> dict[str, Any]:
    """Return the extensions of a stored state as builtins (`AgentState.get` types them)."""
    return {
        key: entry[_VALUE] if isinstance(entry, dict) and _VALUE in entry else entry
        for key, entry in stored.items()
    }


def same_stored(a: object, b: object) -> bool:
    """Return whether ``a`` and ``b`` are stored alike: equal, or one typed from the other.

    A value loaded as builtins and typed by its first read (`AgentState.get`) is unchanged.
    """
    if a == b:
        return True
    if type(a) is type(b):
        return False
    try:
        return bool(_as_json(a) == _as_json(b))
    except (TypeError, ValueError):
        return False


def _as_json(value: object) -> object:
    """Return ``value`` as it comes back from the store's JSON (lists for tuples …)."""
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=enc_hook))
