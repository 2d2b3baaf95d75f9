"""context-harness core: values, the chain, token estimation, policy, manifest and the agent.

Names are imported on first use (PEP 562 ``__getattr__``), so ``import harness``
costs almost nothing and a program pays only for the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    # `import X as X`: the type checker's explicit re-export (``__all__`` is not a literal)
    from harness.accounting import estimate_request as estimate_request
    from harness.adapters.completion import acompletion as acompletion
    from harness.adapters.completion import completion as completion
    from harness.adapters.completion import manifest_of as manifest_of
    from harness.agent.loop import HarnessAgent as HarnessAgent
    from harness.agent.loop import RuntimeContext as RuntimeContext
    from harness.agent.permissions import PermissionRule as PermissionRule
    from harness.agent.permissions import ToolPermissions as ToolPermissions
    from harness.blocks import ContextBlock as ContextBlock
    from harness.blocks import content_hash as content_hash
    from harness.chain import compose as compose
    from harness.errors import ConfigurationError as ConfigurationError
    from harness.errors import ContextBudgetExceeded as ContextBudgetExceeded
    from harness.errors import ContextBuildError as ContextBuildError
    from harness.errors import ContextOverflowError as ContextOverflowError
    from harness.errors import DuplicateTurn as DuplicateTurn
    from harness.errors import HarnessError as HarnessError
    from harness.errors import InvalidInputError as InvalidInputError
    from harness.errors import InvalidToolPairs as InvalidToolPairs
    from harness.errors import MaxRoundsExceeded as MaxRoundsExceeded
    from harness.errors import PathEscapeError as PathEscapeError
    from harness.errors import ProviderAuthError as ProviderAuthError
    from harness.errors import ProviderBadRequest as ProviderBadRequest
    from harness.errors import ProviderError as ProviderError
    from harness.errors import ProviderRateLimited as ProviderRateLimited
    from harness.errors import ProviderUnavailable as ProviderUnavailable
    from harness.errors import SessionBusy as SessionBusy
    from harness.errors import SourceError as SourceError
    from harness.errors import StateConflict as StateConflict
    from harness.errors import StoreFileLost as StoreFileLost
    from harness.errors import WorkspaceError as WorkspaceError
    from harness.events import AgentEvent as AgentEvent
    from harness.fragments.editing import Fragments as Fragments
    from harness.fragments.editing import SecretPattern as SecretPattern
    from harness.fragments.editing import redact as redact
    from harness.fragments.model import Fragment as Fragment
    from harness.fragments.model import FragmentPolicy as FragmentPolicy
    from harness.manifest import ContextManifest as ContextManifest
    from harness.manifest import ManifestItem as ManifestItem
    from harness.manifest import ManifestItems as ManifestItems
    from harness.manifest import Transform as Transform
    from harness.manifest import TransformKind as TransformKind
    from harness.messages import ContentPart as ContentPart
    from harness.messages import Message as Message
    from harness.messages import ToolCall as ToolCall
    from harness.messages import ToolSchema as ToolSchema
    from harness.policy import ContextPolicy as ContextPolicy
    from harness.request import ModelRequest as ModelRequest
    from harness.request import ModelResponse as ModelResponse
    from harness.request import ProviderRetry as ProviderRetry
    from harness.request import RequestIds as RequestIds
    from harness.request import RunScope as RunScope
    from harness.request import SystemPart as SystemPart
    from harness.request import Usage as Usage
    from harness.sessions import SessionStore as SessionStore
    from harness.sessions import open_store as open_store
    from harness.sessions.redaction import redact_message as redact_message
    from harness.state import AgentState as AgentState
    from harness.state import SessionKey as SessionKey
    from harness.tokens import TokenEstimator as TokenEstimator
    from harness.tokens import approximate as approximate
    from harness.tokens import estimator_for as estimator_for
    from harness.tools import Tool as Tool
    from harness.tools import ToolContext as ToolContext
    from harness.tools import tool as tool
    from harness.types import Concern as Concern
    from harness.types import Handler as Handler
    from harness.types import Middleware as Middleware
    from harness.types import ModelClient as ModelClient
    from harness.workspace import Workspace as Workspace

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
    "Transform": "harness.manifest",
    "TransformKind": "harness.manifest",
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

__all__ = sorted(_HOMES)
"""Every lazy export (a test checks the ``TYPE_CHECKING`` imports name the same)."""
