"""Middleware state in the store with its types intact.

``AgentState.extensions`` holds frozen msgspec values (TaskState's `TodoList`,
`PlanMode` …). Stored as plain JSON they would come back as dicts, and `todo_items()` would
find nothing. Each value is stored with the name of its type, and a
registered type is rebuilt on load; an unregistered struct comes back as builtins. Each owner
registers its own types with `register_state_type` where they are defined.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from harness.errors import ConfigurationError
from harness.manifest import dec_hook, enc_hook

_TYPES: dict[str, type[msgspec.Struct]] = {}
_S = TypeVar("_S", bound=msgspec.Struct)
_TYPE: Final = "type"
_VALUE: Final = "value"


def type_name(cls: type) -> str:
    """Return the name a value's type is stored under."""
    return f"{cls.__module__}.{cls.__qualname__}"


def register_state_type(cls: type[_S]) -> type[_S]:
    """Let values of ``cls`` in ``AgentState.extensions`` come back from the store as ``cls``.

    Usable as a class decorator; returns ``cls``.
    """
    _TYPES[type_name(cls)] = cls
    return cls


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
    """Return the extensions of a stored state, registered types rebuilt."""
    out: dict[str, Any] = {}
    for key, entry in stored.items():
        if not isinstance(entry, dict) or _VALUE not in entry:
            out[key] = entry
            continue
        cls = _TYPES.get(entry.get(_TYPE, ""))
        out[key] = (
            msgspec.convert(entry[_VALUE], cls, dec_hook=dec_hook)
            if cls is not None
            else entry[_VALUE]
        )
    return out
