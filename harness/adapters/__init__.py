"""The ways in: the drop-in `acompletion` / `completion` call, the Agents SDK session, LangChain.

The names of `harness.adapters.completion`, at the path they had before the wing was a package,
and `HarnessSession` (`harness.adapters.agents_sdk`: an OpenAI Agents SDK ``Session`` on our
store; it imports nothing of the SDK at run time, so this face stays cheap). The LangChain
adapter is imported from its own module (`harness.adapters.langchain`, the ``langchain``
extra). The face is not lazy: its function `completion` shares its name with the module
``harness.adapters.completion``, which would shadow it once imported.
"""

from __future__ import annotations

from harness.adapters.agents_sdk import HarnessSession
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
    "HarnessSession",
    "PrefixCache",
    "StorePrefixCache",
    "acompletion",
    "completion",
    "manifest_of",
    "prepare_messages",
]
