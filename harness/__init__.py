"""context-harness core: values, the chain, token estimation, policy, manifest and the agent."""

from harness.accounting import estimate_request
from harness.adapters import acompletion, completion, manifest_of
from harness.agent import HarnessAgent, RuntimeContext
from harness.blocks import ContextBlock, content_hash
from harness.chain import compose
from harness.errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    ContextBuildError,
    ContextOverflowError,
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
    ScriptExhausted,
    SourceError,
    StateConflict,
    WorkspaceError,
)
from harness.events import AgentEvent
from harness.fragments import Fragment, FragmentPolicy, Fragments, SecretPattern, redact
from harness.manifest import ContextManifest, ManifestItem
from harness.messages import ContentPart, Message, ToolCall, ToolSchema
from harness.permissions import PermissionRule, ToolPermissions
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
from harness.sessions import SessionKey, SessionStore, open_store
from harness.state import AgentState
from harness.tokens import TokenEstimator, approximate, estimator_for
from harness.tools import Tool, ToolContext, tool
from harness.types import Concern, Handler, Middleware
from harness.workspace import Workspace

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
    "Fragment",
    "FragmentPolicy",
    "Fragments",
    "Handler",
    "HarnessAgent",
    "HarnessError",
    "InvalidInputError",
    "InvalidToolPairs",
    "ManifestItem",
    "MaxRoundsExceeded",
    "Message",
    "Middleware",
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
    "ScriptExhausted",
    "SecretPattern",
    "SessionKey",
    "SessionStore",
    "SourceError",
    "StateConflict",
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
    "tool",
]
