"""Model clients: the `ModelClient` protocol, a LiteLLM client and a scripted offline model.

``LiteLLMClient`` imports litellm lazily, so importing this package stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from providers.base import ModelClient, StreamChunk
from providers.scripted import ScriptedModel

if TYPE_CHECKING:
    from providers.litellm_client import LiteLLMClient

__all__ = ["LiteLLMClient", "ModelClient", "ScriptedModel", "StreamChunk"]


def __getattr__(name: str) -> Any:
    if name == "LiteLLMClient":
        from providers.litellm_client import LiteLLMClient

        return LiteLLMClient
    raise AttributeError(f"module 'providers' has no attribute {name!r}")
