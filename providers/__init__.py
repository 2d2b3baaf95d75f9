"""Model clients: the `ModelClient` protocol, a LiteLLM client and a scripted offline model.

`LiteLLMClient` imports litellm only when it first talks to a provider, so importing this
package stays fast. It retries rate limits and transient 5xx answers (`RetryPolicy`) and
records each retry as a `ProviderRetry` (`retries_of(response)`).

Names are imported on first use (PEP 562 ``__getattr__``), so ``import providers``
costs almost nothing and a program pays only for the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    # `import X as X`: the type checker's explicit re-export (``__all__`` is not a literal)
    from harness.request import ProviderRetry as ProviderRetry
    from harness.types import ModelClient as ModelClient
    from harness.types import StreamChunk as StreamChunk
    from providers.litellm_client import LiteLLMClient as LiteLLMClient
    from providers.litellm_client import retries_of as retries_of
    from providers.responses_client import ResponsesClient as ResponsesClient
    from providers.retry import RetryPolicy as RetryPolicy
    from providers.scripted import BrokenStream as BrokenStream
    from providers.scripted import ScriptedModel as ScriptedModel
    from providers.scripted import ScriptExhausted as ScriptExhausted

_HOMES: dict[str, str] = {
    "BrokenStream": "providers.scripted",
    "LiteLLMClient": "providers.litellm_client",
    "ModelClient": "harness.types",
    "ProviderRetry": "harness.request",
    "ResponsesClient": "providers.responses_client",
    "RetryPolicy": "providers.retry",
    "ScriptExhausted": "providers.scripted",
    "ScriptedModel": "providers.scripted",
    "StreamChunk": "harness.types",
    "retries_of": "providers.litellm_client",
}
"""Where each exported name lives; imported on first use (`__getattr__`)."""


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _HOMES)

__all__ = sorted(_HOMES)
"""Every lazy export (a test checks the ``TYPE_CHECKING`` imports name the same)."""
