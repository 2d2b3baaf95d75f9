"""Model clients: the `ModelClient` protocol, a LiteLLM client and a scripted offline model.

`LiteLLMClient` imports litellm only when it first talks to a provider, so importing this
package stays fast. It retries rate limits and transient 5xx answers (`RetryPolicy`) and
records each retry as a `ProviderRetry` (`retries_of(response)`).
"""

from __future__ import annotations

from harness.request import ProviderRetry
from providers.base import ModelClient, StreamChunk
from providers.litellm_client import LiteLLMClient, retries_of
from providers.retry import RetryPolicy
from providers.scripted import ScriptedModel

__all__ = [
    "LiteLLMClient",
    "ModelClient",
    "ProviderRetry",
    "RetryPolicy",
    "ScriptedModel",
    "StreamChunk",
    "retries_of",
]
