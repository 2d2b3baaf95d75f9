"""`HarnessProxyHook`: the middleware stack inside a litellm proxy, as a pre-call hook.

The proxy is the horizontally scaled engine; the harness is a hook inside it. Every chat
request that passes through the proxy has its ``messages`` rewritten by the stack (System
from the system messages, offload, budget fitting, compaction, pair validation) before
the proxy forwards it, exactly as `harness.acompletion` would prepare it. One proxy uses
a SQLite store; several proxies behind a load balancer share one PostgreSQL store.

- **Users** follow the proxy's own auth: the key's ``user_id``, else its hashed key
  (``key:<token>``) — so one key's sessions and cached summaries never reach another's.
- **Sessions**: the ``x-harness-session-id`` request header, or ``metadata.session_id``
  (``harness_session_id``) in the body. Without one, the request is stateless: the client's
  messages are the history and summaries are cached by a hash of what they replace.
- **The manifest** is recorded in the session's log (sessions) and returned as response
  headers: ``x-harness-estimated-tokens``, ``x-harness-input-limit``,
  ``x-harness-transforms``, ``x-harness-omitted`` and ``x-harness-validation``.

Configure it in the proxy's ``config.yaml``; the options come from a small module next to
it (or, for the ready-made ``proxy_handler_instance``, from ``HARNESS_PROXY_STORE``)::

    # harness_hook.py, next to config.yaml
    from providers.proxy_hook import HarnessProxyHook
    hook = HarnessProxyHook(store="postgresql://harness@db/harness")

    # config.yaml
    litellm_settings:
      callbacks: harness_hook.hook      # or: providers.proxy_hook.proxy_handler_instance

Summaries are requested from ``summary_model`` (a `LiteLLMClient`), by default the
request's own model name through litellm — give one explicitly when the proxy's model
names are aliases litellm cannot route by itself.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from harness.adapters import prepare_messages
from harness.manifest import ContextManifest
from harness.policy import ContextPolicy
from harness.request import ModelClientLike
from harness.sessions.store import SessionStore
from harness.types import Middleware
from providers.litellm_client import LiteLLMClient, load_litellm

__all__ = ["SESSION_HEADER", "HarnessProxyHook", "proxy_handler_instance"]

SESSION_HEADER: Final = "x-harness-session-id"
"""The request header naming the session."""
SESSION_METADATA: Final = ("harness_session_id", "session_id")
"""Keys of the request's ``metadata`` that name the session (first found wins)."""
CHAT_CALLS: Final = frozenset({"completion", "acompletion", "text_completion"})
"""The proxy call types whose ``messages`` the hook prepares."""
_STASH: Final = "harness_manifest"
"""Where the manifest waits in ``data["metadata"]`` for the response-headers hook."""

load_litellm()  # offline and quiet, before litellm's modules load
_CustomLogger: Any = importlib.import_module("litellm.integrations.custom_logger").CustomLogger


class HarnessProxyHook(_CustomLogger):  # type: ignore[misc]
    """A litellm ``CustomLogger`` whose pre-call hook runs the stack on chat requests.

    Args:
        store: the session store or its URL (``sqlite:///…`` for one proxy,
            ``postgresql://…`` for several); default: a private in-memory one.
        stack: the middleware list (default: `middleware.default_stack()`).
        policy: budget, estimator and observer (default: `ContextPolicy()`).
        summary_model: the client summaries are requested from (default: a
            `LiteLLMClient` for the request's model).
        agent_id: the agent id sessions are recorded under.
    """

    def __init__(
        self,
        *,
        store: SessionStore | str | None = None,
        stack: Sequence[Middleware] | None = None,
        policy: ContextPolicy | None = None,
        summary_model: ModelClientLike | None = None,
        agent_id: str = "litellm-proxy",
    ) -> None:
        super().__init__()
        self.store = store
        self.stack = list(stack) if stack is not None else None
        self.policy = policy
        self.summary_model = summary_model
        self.agent_id = agent_id

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        """Rewrite ``data["messages"]`` with the stack; return ``data`` for the proxy to send.

        Raises:
            InvalidInputError: a message is malformed (the proxy answers 4xx/5xx).
            ContextBuildError: the request could not be prepared within its budget.
        """
        messages = data.get("messages")
        if call_type not in CHAT_CALLS or not isinstance(messages, list) or not messages:
            return data
        model = str(data.get("model") or "")
        settings = {k: v for k, v in data.items() if k in ("max_tokens", "max_completion_tokens")}
        prepared, manifest = await prepare_messages(
            model,
            messages,
            data.get("tools") or (),
            client=self.summary_model or LiteLLMClient(model),
            stack=self.stack,
            policy=self.policy,
            session_id=session_of(data),
            user_id=user_of(user_api_key_dict),
            store=self.store,
            agent_id=self.agent_id,
            settings=settings or None,
        )
        data["messages"] = prepared
        metadata = data.get("metadata")
        if not isinstance(metadata, dict):
            metadata = data["metadata"] = {}
        if manifest is not None:
            metadata[_STASH] = manifest_headers(manifest)
        return data

    async def async_post_call_response_headers_hook(
        self,
        data: dict[str, Any],
        user_api_key_dict: Any,
        response: object,
        request_headers: dict[str, str] | None = None,
        litellm_call_info: dict[str, object] | None = None,
    ) -> dict[str, str] | None:
        """Return the ``x-harness-*`` headers of the request's manifest, if it has one."""
        metadata = data.get("metadata")
        headers = metadata.get(_STASH) if isinstance(metadata, Mapping) else None
        return dict(headers) if isinstance(headers, Mapping) else None


def user_of(user_api_key_dict: Any) -> str:
    """Return whose request it is: the key's user id, else ``key:<hashed key>``, else ``""``."""
    user = getattr(user_api_key_dict, "user_id", None)
    if isinstance(user, str) and user:
        return user
    token = getattr(user_api_key_dict, "token", None) or getattr(user_api_key_dict, "api_key", None)
    return f"key:{token}" if isinstance(token, str) and token else ""


def session_of(data: Mapping[str, Any]) -> str | None:
    """Return the session id of a proxy request: its header, else its metadata, else ``None``."""
    request = data.get("proxy_server_request")
    headers = request.get("headers") if isinstance(request, Mapping) else None
    if isinstance(headers, Mapping):
        for name, value in headers.items():
            if str(name).lower() == SESSION_HEADER and isinstance(value, str) and value:
                return value
    metadata = data.get("metadata")
    if isinstance(metadata, Mapping):
        for key in SESSION_METADATA:
            value = metadata.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def manifest_headers(manifest: ContextManifest) -> dict[str, str]:
    """Return the ``x-harness-*`` response headers of ``manifest`` (ASCII, no prompt text)."""
    omitted = [t for t in manifest.transforms if "omit" in t or "drop" in t]
    return {
        "x-harness-estimated-tokens": str(manifest.estimated_input_tokens),
        "x-harness-input-limit": str(manifest.input_limit),
        "x-harness-validation": manifest.validation,
        "x-harness-transforms": _header(manifest.transforms),
        "x-harness-omitted": _header(omitted),
        "x-harness-call-id": manifest.call_id,
    }


def _header(values: Sequence[str]) -> str:
    text = msgspec.json.encode(list(values)).decode()
    return text.encode("ascii", "backslashreplace").decode()[:4_000]


proxy_handler_instance: Final = HarnessProxyHook(store=os.environ.get("HARNESS_PROXY_STORE"))
"""A ready hook for ``config.yaml`` (``callbacks: providers.proxy_hook.proxy_handler_instance``);
its store is ``HARNESS_PROXY_STORE`` (a URL), else a private in-memory one."""
