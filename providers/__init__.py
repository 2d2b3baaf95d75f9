"""Model clients: the `ModelClient` protocol, a LiteLLM client and a scripted offline model.

`LiteLLMClient` imports litellm only when it first talks to a provider, so importing this
package stays fast.
"""

from __future__ import annotations

from providers.base import ModelClient, StreamChunk
from providers.litellm_client import LiteLLMClient
from providers.scripted import ScriptedModel

__all__ = ["LiteLLMClient", "ModelClient", "ScriptedModel", "StreamChunk"]
