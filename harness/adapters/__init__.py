"""The ways in: the drop-in `acompletion` / `completion` call and the LangChain adapter.

The names of `harness.adapters.completion`, at the path they had before the wing was a package.
"""

from __future__ import annotations

from harness.adapters.completion import (
    MANIFEST_KEY,
    PrefixCache,
    StorePrefixCache,
    acompletion,
    completion,
    manifest_of,
    prepare_messages,
)

__all__ = [
    "MANIFEST_KEY",
    "PrefixCache",
    "StorePrefixCache",
    "acompletion",
    "completion",
    "manifest_of",
    "prepare_messages",
]
