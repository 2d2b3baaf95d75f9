"""context-harness core: values, the chain, token estimation, policy, manifest and the agent.

Names are imported on first use (PEP 562 ``__getattr__``), so ``import harness``
costs almost nothing and a program pays only for the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from harness.accounting import estimate_request
    from harness.adapters.completion import acompletion, completion, manifest_of
    from harness.agent.loop import HarnessAgent, RuntimeContext
    from harness.agent.permissions import PermissionRule, ToolPermissions
    from harness.blocks import ContextBlock, content_hash
    from harness.chain import compose
    from harness.errors import (
        ConfigurationError,
        ContextBudgetExceeded,
        ContextBuildError,
        ContextOverflowError,
        DuplicateTurn,
        HarnessError,
        InvalidInputError,
        InvalidToolPairs,
        MaxRoundsExceeded,
        PathEscapeError,
        ProviderAuthError,
        ProviderBadRequest,
        ProviderError,
        ProviderRateLimited,
        ProviderUnavailable,
        SessionBusy,
        SourceError,
        StateConflict,
        StoreFileLost,
        WorkspaceError,
    )
    from harness.events import AgentEvent
    from harness.fragments.editing import Fragments, SecretPattern, redact
    from harness.fragments.model import Fragment, FragmentPolicy
    from harness.manifest import ContextManifest, ManifestItem, ManifestItems
    from harness.messages import ContentPart, Message, ToolCall, ToolSchema
    from harness.policy import ContextPolicy
    from harness.request import (
        ModelRequest,
        ModelResponse,
        ProviderRetry,
        RequestIds,
        RunScope,
        SystemPart,
        Usage,
    )
    from harness.sessions import SessionStore, open_store
    from harness.sessions.redaction import redact_message
    from harness.state import AgentState, SessionKey
    from harness.tokens import TokenEstimator, approximate, estimator_for
    from harness.tools import Tool, ToolContext, tool
    from harness.types import Concern, Handler, Middleware, ModelClient
    from harness.workspace import Workspace

_HOMES: dict[str, str] = {
    "AgentEvent": "harness.events",
    "AgentState": "harness.state",
    "Concern": "harness.types",
    "ConfigurationError": "harness.errors",
    "ContentPart": "harness.messages",
    "ContextBlock": "harness.blocks",
    "ContextBudgetExceeded": "harness.errors",
    "ContextBuildError": "harness.errors",
    "ContextManifest": "harness.manifest",
    "ContextOverflowError": "harness.errors",
    "ContextPolicy": "harness.policy",
    "DuplicateTurn": "harness.errors",
    "Fragment": "harness.fragments.model",
    "FragmentPolicy": "harness.fragments.model",
    "Fragments": "harness.fragments.editing",
    "Handler": "harness.types",
    "HarnessAgent": "harness.agent.loop",
    "HarnessError": "harness.errors",
    "InvalidInputError": "harness.errors",
    "InvalidToolPairs": "harness.errors",
    "ManifestItem": "harness.manifest",
    "ManifestItems": "harness.manifest",
    "MaxRoundsExceeded": "harness.errors",
    "Message": "harness.messages",
    "Middleware": "harness.types",
    "ModelClient": "harness.types",
    "ModelRequest": "harness.request",
    "ModelResponse": "harness.request",
    "PathEscapeError": "harness.errors",
    "PermissionRule": "harness.agent.permissions",
    "ProviderAuthError": "harness.errors",
    "ProviderBadRequest": "harness.errors",
    "ProviderError": "harness.errors",
    "ProviderRateLimited": "harness.errors",
    "ProviderRetry": "harness.request",
    "ProviderUnavailable": "harness.errors",
    "RequestIds": "harness.request",
    "RunScope": "harness.request",
    "RuntimeContext": "harness.agent.loop",
    "SecretPattern": "harness.fragments.editing",
    "SessionBusy": "harness.errors",
    "SessionKey": "harness.state",
    "SessionStore": "harness.sessions",
    "SourceError": "harness.errors",
    "StateConflict": "harness.errors",
    "StoreFileLost": "harness.errors",
    "SystemPart": "harness.request",
    "TokenEstimator": "harness.tokens",
    "Tool": "harness.tools",
    "ToolCall": "harness.messages",
    "ToolContext": "harness.tools",
    "ToolPermissions": "harness.agent.permissions",
    "ToolSchema": "harness.messages",
    "Usage": "harness.request",
    "Workspace": "harness.workspace",
    "WorkspaceError": "harness.errors",
    "acompletion": "harness.adapters.completion",
    "approximate": "harness.tokens",
    "completion": "harness.adapters.completion",
    "compose": "harness.chain",
    "content_hash": "harness.blocks",
    "estimate_request": "harness.accounting",
    "estimator_for": "harness.tokens",
    "manifest_of": "harness.adapters.completion",
    "open_store": "harness.sessions",
    "redact": "harness.fragments.editing",
    "redact_message": "harness.sessions.redaction",
    "tool": "harness.tools",
}
"""Where each exported name lives; imported on first use (`__getattr__`)."""


__getattr__, __dir__ = _lazy_exports(__name__, globals(), _HOMES)

__all__ = [
    "AgentEvent",
    "AgentState",
    "Concern",
    "ConfigurationError",
    "ContentPart",
    "ContextBlock",
    "ContextBudgetExceeded",
    "ContextBuildError",
    "ContextManifest",
    "ContextOverflowError",
    "ContextPolicy",
    "DuplicateTurn",
    "Fragment",
    "FragmentPolicy",
    "Fragments",
    "Handler",
    "HarnessAgent",
    "HarnessError",
    "InvalidInputError",
    "InvalidToolPairs",
    "ManifestItem",
    "ManifestItems",
    "MaxRoundsExceeded",
    "Message",
    "Middleware",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "PathEscapeError",
    "PermissionRule",
    "ProviderAuthError",
    "ProviderBadRequest",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderRetry",
    "ProviderUnavailable",
    "RequestIds",
    "RunScope",
    "RuntimeContext",
    "SecretPattern",
    "SessionBusy",
    "SessionKey",
    "SessionStore",
    "SourceError",
    "StateConflict",
    "StoreFileLost",
    "SystemPart",
    "TokenEstimator",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolPermissions",
    "ToolSchema",
    "Usage",
    "Workspace",
    "WorkspaceError",
    "acompletion",
    "approximate",
    "completion",
    "compose",
    "content_hash",
    "estimate_request",
    "estimator_for",
    "manifest_of",
    "open_store",
    "redact",
    "redact_message",
    "tool",
]
