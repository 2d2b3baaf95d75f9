"""`HarnessProxyHook`: the middleware stack inside a litellm proxy, as a pre-call hook.

The proxy is the horizontally scaled engine; the harness is a hook inside it. Every chat
request that passes through the proxy has its ``messages`` rewritten by the stack (System
from the system messages, offload, budget fitting, compaction, pair validation) before
the proxy forwards it, exactly as `harness.acompletion` would prepare it. One proxy uses
a SQLite store; several proxies behind a load balancer share one PostgreSQL store.

- **Users** follow the proxy's own auth: the key's ``user_id``, else ``key:<HMAC>``, an
  HMAC-SHA256 of the key's token — so one key's sessions and cached summaries never reach
  another's, and the store never holds a key (litellm hands some configurations' raw key
  over as the token: a custom auth returning ``UserAPIKeyAuth(api_key=…)`` for a key
  without the ``sk-`` prefix). The HMAC key is ``user_secret`` (``callback_settings:
  harness: user_secret: os.environ/…``), else the ``HARNESS_PROXY_USER_SECRET`` environment
  variable, else a built-in constant. Give every replica that shares a store the same
  secret, so one key is one user on all of them; changing it starts new users (their old
  sessions stay in the store under the old ids). With the built-in constant the id is still
  one-way, but whoever reads the store and holds a candidate key can test it: set a secret.
- **Sessions**: the ``x-harness-session-id`` request header, or ``metadata.session_id``
  (``harness_session_id``) in the body. Without one, the request is stateless: the client's
  messages are the history and summaries are cached by a hash of what they replace.
- **The manifest** is recorded in the session's log (sessions) and returned as response
  headers: ``x-harness-estimated-tokens``, ``x-harness-input-limit``,
  ``x-harness-transforms``, ``x-harness-omitted``, ``x-harness-validation`` and
  ``x-harness-cache-break`` (what broke the provider's cached prefix since the session's
  previous request, `ContextManifest.cache_break`; ``none`` when nothing did),
  ``x-harness-cache-expected`` (the tokens that prefix holds, `ContextManifest.cache_expected`)
  and ``x-harness-cache-verdict`` (how the provider's reported cached tokens compare:
  ``agree``, ``provider_miss``, ``break_confirmed``, ``unexpected_hit``, or ``none``).
- **Models**: a request names a ``model_list`` alias; it is counted as the alias's first
  deployment's ``litellm_params.model`` (its tokenizer family), with that deployment's
  ``model_info.max_input_tokens`` as the window when set (`deployment_client`).
- **Other APIs**: only Chat Completions is prepared. The Responses API and Anthropic's
  Messages API (`UNPREPARED_CALLS`) are refused with an HTTP 400 naming Chat Completions,
  unless ``unprepared_apis: pass`` forwards them as sent.
- **Refusals** are HTTP errors whose detail names the ``callback_settings`` keys a proxy
  operator sets, never the Python API's names, and whose ``fix`` says who changes what.
- **Summaries** go to the deployment the request's model names in the proxy's
  ``model_list`` (its ``litellm_params``; its ``model_info.max_input_tokens`` is the window),
  or to ``summary_model`` when configured.

Configure it in the proxy's ``config.yaml`` (see ``examples/proxy/config.yaml``); the
options are `ProxyHookSettings`, read from ``callback_settings: harness:``::

    callback_settings:
      harness:
        store: postgresql://harness@db/harness   # or os.environ/HARNESS_STORE
        max_input_tokens: 32000
    litellm_settings:
      callbacks: ["providers.proxy_hook.proxy_handler_instance"]
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import msgspec

from harness.accounting.cache_verdict import cache_verdict
from harness.adapters.completion import prepare_messages
from harness.errors import (
    ConfigurationError,
    ContextBuildError,
    InvalidInputError,
    SourceError,
    StateConflict,
)
from harness.manifest import ContextManifest
from harness.policy import ContextPolicy
from harness.presend import output_limit
from harness.request import ModelRequest, ModelResponse
from harness.sessions.store import SessionStore
from harness.types import Middleware, ModelClient
from providers._response import usage_from
from providers.litellm_client import LiteLLMClient, load_litellm
from providers.proxy_warm_up import warm_up

__all__ = [
    "SESSION_HEADER",
    "SETTINGS_KEY",
    "USER_SECRET_ENV",
    "HarnessProxyHook",
    "ProxyHookSettings",
]  # and proxy_handler_instance, built on first access (`__getattr__`)

SESSION_HEADER: Final = "x-harness-session-id"
"""The request header naming the session."""
SESSION_METADATA: Final = ("harness_session_id", "session_id")
"""Keys of the request's ``metadata`` that name the session (first found wins)."""
SETTINGS_KEY: Final = "harness"
"""The key of the hook's options under the proxy's ``callback_settings``."""
CHAT_CALLS: Final = frozenset({"completion", "acompletion", "text_completion"})
"""The proxy call types whose ``messages`` the hook prepares."""
UNPREPARED_CALLS: Final = {
    "responses": "the Responses API (/v1/responses)",
    "aresponses": "the Responses API (/v1/responses)",
    "anthropic_messages": "the Anthropic Messages API (/v1/messages)",
    "aanthropic_messages": "the Anthropic Messages API (/v1/messages)",
}
"""Call types that carry a conversation the hook does not prepare: refused unless
``unprepared_apis: pass`` (a silent pass-through would send them unfitted and unrecorded)."""
USER_SECRET_ENV: Final = "HARNESS_PROXY_USER_SECRET"
"""The environment variable with the HMAC key of key-derived user ids (see `user_of`)."""
DEFAULT_USER_SECRET: Final = b"context-harness proxy user id v1"
"""The HMAC key when none is configured: ids stay one-way, but set a secret (module docstring)."""
_STASH: Final = "harness_manifest"
"""Where the manifest waits in ``data["metadata"]`` for the response-headers hook."""

load_litellm()  # offline and quiet, before litellm's modules load
_CustomLogger: Any = importlib.import_module("litellm.integrations.custom_logger").CustomLogger


class ProxyHookSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The hook's options, as written under ``callback_settings: harness:`` in config.yaml."""

    store: str | None = None
    """The session store's URL: ``sqlite:///…`` (one proxy), ``postgresql://…`` (several);
    ``None``: a private in-memory store (sessions end with the process)."""
    agent_id: str = "litellm-proxy"
    """The agent id sessions and manifests are recorded under."""
    max_input_tokens: int | None = None
    """An input cap in tokens below the model's window (`ContextPolicy.max_input_tokens`)."""
    reserve_output: int = 4096
    """Tokens kept free for the answer when the request sets no ``max_tokens``."""
    safety_margin: int = 1024
    """Tokens kept free for estimation error."""
    summary_model: str | None = None
    """A litellm model name for summaries (default: the request's deployment)."""
    summary_api_base: str | None = None
    """The base URL of ``summary_model``."""
    summary_api_key: str | None = None
    """The API key of ``summary_model``."""
    stack: str | None = None
    """``module.function`` returning the middleware list (default: `default_stack()`)."""
    unprepared_apis: Literal["refuse", "pass"] = "refuse"
    """What to do with a conversation on an API the hook does not prepare (`UNPREPARED_CALLS`:
    the Responses API, Anthropic's Messages): ``refuse`` answers HTTP 400 naming Chat
    Completions; ``pass`` forwards it as the client sent it (not fitted, not recorded)."""
    user_secret: str | None = None
    """The HMAC-SHA256 key that turns a key without a user id into its user id
    (``key:<HMAC of the token>``); the same on every replica sharing the store. Default:
    ``HARNESS_PROXY_USER_SECRET``, else `DEFAULT_USER_SECRET`."""
    warm_up: bool = True
    """Run one offline preparation when the hook is built (`providers.proxy_warm_up`), so a
    worker's first request does not wait for the stack's imports and tokenizer."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ProxyHookSettings:
        """Return the settings in ``raw`` (numbers may arrive as strings from env variables).

        Raises:
            ConfigurationError: an unknown key or a value of the wrong type, named.
        """
        try:
            return msgspec.convert(dict(raw or {}), cls, strict=False)
        except msgspec.ValidationError as exc:
            raise ConfigurationError(
                f"callback_settings.{SETTINGS_KEY} in the proxy's config.yaml: {exc}; "
                f"the keys are {', '.join(cls.__struct_fields__)}"
            ) from exc


class HarnessProxyHook(_CustomLogger):  # type: ignore[misc]
    """A litellm ``CustomLogger`` whose pre-call hook runs the stack on chat requests.

    Args:
        store: the session store or its URL (``sqlite:///…`` for one proxy,
            ``postgresql://…`` for several); default: a private in-memory one.
        stack: the middleware list (default: `middleware.default_stack()`).
        policy: budget, estimator and observer (default: `ContextPolicy()`).
        summary_model: the client summaries are requested from (default: the deployment
            the request's model names in the proxy, else a `LiteLLMClient` for that name).
        agent_id: the agent id sessions are recorded under.
        user_secret: the HMAC key of key-derived user ids (`user_of`); default: the
            ``HARNESS_PROXY_USER_SECRET`` environment variable, else `DEFAULT_USER_SECRET`.
        unprepared_apis: ``refuse`` (HTTP 400) or ``pass`` a request on an API the hook
            does not prepare (`UNPREPARED_CALLS`).

    Raises:
        ConfigurationError: ``user_secret`` is empty or not text or bytes.
    """

    def __init__(
        self,
        *,
        store: SessionStore | str | None = None,
        stack: Sequence[Middleware] | None = None,
        policy: ContextPolicy | None = None,
        summary_model: ModelClient | None = None,
        agent_id: str = "litellm-proxy",
        user_secret: str | bytes | None = None,
        unprepared_apis: Literal["refuse", "pass"] = "refuse",
    ) -> None:
        super().__init__()
        self._user_secret = user_secret_of(user_secret)
        self.store = store
        self.stack = list(stack) if stack is not None else None
        self.policy = policy
        self.summary_model = summary_model
        self.agent_id = agent_id
        self.unprepared_apis = unprepared_apis

    @classmethod
    def from_settings(cls, settings: ProxyHookSettings) -> HarnessProxyHook:
        """Return a hook configured by ``settings`` (see `ProxyHookSettings`).

        Raises:
            ConfigurationError: ``stack`` does not name a function returning a list.
        """
        summary = None
        if settings.summary_model:
            summary = LiteLLMClient(
                settings.summary_model,
                api_base=settings.summary_api_base,
                api_key=settings.summary_api_key,
            )
        policy = ContextPolicy(
            max_input_tokens=settings.max_input_tokens,
            reserve_output=settings.reserve_output,
            safety_margin=settings.safety_margin,
        )
        hook = cls(
            store=settings.store,
            stack=_stack_from(settings.stack) if settings.stack else None,
            policy=policy,
            summary_model=summary,
            agent_id=settings.agent_id,
            user_secret=settings.user_secret,
            unprepared_apis=settings.unprepared_apis,
        )
        if settings.warm_up:
            warm_up(hook.stack, hook.policy)
        return hook

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: Any
    ) -> dict[str, Any]:
        """Rewrite ``data["messages"]`` with the stack; return ``data`` for the proxy to send.

        Raises:
            fastapi.HTTPException: the request cannot be prepared: 400 for a malformed
                message or one that cannot fit its budget, 409 when another request of the
                same session committed first (send it again), 500 for a failed source or
                a setting that leaves no room for input (the proxy operator's to fix) —
                the detail is the harness error's message, which says what to do; 400 for
                the Responses or Anthropic Messages API (`UNPREPARED_CALLS`), naming Chat
                Completions, unless ``unprepared_apis: pass``.
        """
        if str(call_type) in UNPREPARED_CALLS and self.unprepared_apis != "pass":
            raise _unprepared_error(str(call_type))
        messages = data.get("messages")
        if call_type not in CHAT_CALLS or not isinstance(messages, list) or not messages:
            return data
        deployment = deployment_client(str(data.get("model") or ""))
        settings = {k: v for k, v in data.items() if k in ("max_tokens", "max_completion_tokens")}
        try:
            prepared, manifest = await prepare_messages(
                deployment.model,  # counted and windowed as the deployment's model, not the alias
                messages,
                data.get("tools") or (),
                client=_SummariesVia(self.summary_model, deployment)
                if self.summary_model is not None
                else deployment,
                stack=self.stack,
                policy=self.policy,
                session_id=session_of(data),
                user_id=user_of(user_api_key_dict, secret=self._user_secret),
                store=self.store,
                agent_id=self.agent_id,
                settings=settings or None,
            )
        except (InvalidInputError, ContextBuildError, ConfigurationError) as exc:
            raise _http_error(exc) from exc
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
        if not isinstance(headers, Mapping):
            return None
        return {**headers, "x-harness-cache-verdict": verdict_header(headers, response)}


class _SummariesVia:
    """The request's client when ``summary_model`` is set: summaries go to that model.

    The window and output limit of the request's own model stay the deployment's (its
    ``model_info``, its server), never the summary model's.
    """

    def __init__(self, summaries: ModelClient, deployment: LiteLLMClient) -> None:
        self.summaries = summaries
        self.deployment = deployment
        self.model = summaries.model

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send a summary request to ``summary_model``."""
        return await self.summaries.complete(request)

    def context_window(self, model: str | None = None) -> int | None:
        """Return the deployment's window for its model, else the summary model's."""
        if model == self.deployment.model:
            return self.deployment.context_window(model)
        return self.summaries.context_window(model or self.model)

    async def discover_context_window(self, model: str | None = None) -> int | None:
        """Ask the deployment's server for its model's window; the summary model's otherwise."""
        if model == self.deployment.model:
            return await self.deployment.discover_context_window(model)
        discover = getattr(self.summaries, "discover_context_window", None)
        if callable(discover):
            found: int | None = await discover(model or self.model)
            return found
        return self.summaries.context_window(model or self.model)

    def max_output_tokens(self, model: str | None = None) -> int | None:
        """Return the output limit of ``model``: the deployment's, or the summary model's."""
        if model == self.deployment.model:
            return self.deployment.max_output_tokens(model)
        return output_limit(self.summaries, model or self.model)


def deployment_client(model: str) -> LiteLLMClient:
    """Return a client for the deployment the proxy routes ``model`` to (counting, window, summaries).

    Inside a proxy the request's model is a ``model_list`` name (an alias such as
    ``team-model``) that litellm alone can neither route nor count; its first deployment's
    ``litellm_params`` can: the client's model is ``litellm_params.model`` (the tokenizer
    family and litellm's window), its window the deployment's ``model_info.max_input_tokens``
    when set (else litellm's map, else the server's metadata). Outside a proxy, or for a
    name with no deployment, a `LiteLLMClient` for ``model`` itself.
    """
    server = sys.modules.get("litellm.proxy.proxy_server")
    router = getattr(server, "llm_router", None)
    found = _deployments(router, model) if router is not None else None
    if not found:
        return LiteLLMClient(model)
    params = dict(found[0].get("litellm_params") or {})
    info = found[0].get("model_info") or {}
    window = info.get("max_input_tokens") if isinstance(info, Mapping) else None
    if isinstance(window, str) and window.strip().isdigit():  # os.environ/ references
        window = int(window)
    return LiteLLMClient(
        str(params.get("model") or model),
        context_window=window if type(window) is int and window > 0 else None,
        api_base=params.get("api_base"),
        api_key=params.get("api_key"),
    )


def _deployments(router: Any, model: str) -> Any:
    """Return the router's deployments of ``model`` (its registry's, where litellm has one)."""
    registry = getattr(router, "registry", None)
    if callable(registry):
        return registry().deployments(model)
    return router.get_model_list(model_name=model)


def user_of(user_api_key_dict: Any, *, secret: bytes = DEFAULT_USER_SECRET) -> str:
    """Return whose request it is: the key's user id, else ``key:<HMAC>``, else ``""``.

    The HMAC is HMAC-SHA256 under ``secret`` of the key's token (or ``api_key``), in hex:
    the same key gives the same user wherever the secret is the same, and no key — which
    some auth configurations pass as the token unhashed — is ever stored.
    """
    user = getattr(user_api_key_dict, "user_id", None)
    if isinstance(user, str) and user:
        return user
    token = getattr(user_api_key_dict, "token", None) or getattr(user_api_key_dict, "api_key", None)
    if not isinstance(token, str) or not token:
        return ""
    digest = hmac.new(secret, token.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return f"key:{digest.hexdigest()}"


def user_secret_of(configured: str | bytes | None) -> bytes:
    """Return the HMAC key of key-derived user ids: ``configured``, else the env, else the default.

    Raises:
        ConfigurationError: ``configured`` is empty or not text or bytes.
    """
    if configured is None:
        configured = os.environ.get(USER_SECRET_ENV) or DEFAULT_USER_SECRET
    if isinstance(configured, str):
        configured = configured.encode("utf-8", "surrogatepass")
    if not isinstance(configured, bytes) or not configured:
        raise ConfigurationError(
            f"user_secret must be a non-empty text (callback_settings.{SETTINGS_KEY}.user_secret "
            f"or {USER_SECRET_ENV}), got {configured!r}; give a long random string, the same on "
            "every proxy replica"
        )
    return configured


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
    omitted = [t for t in manifest.transforms if t.omitted]
    return {
        "x-harness-estimated-tokens": str(manifest.estimated_input_tokens),
        "x-harness-input-limit": str(manifest.input_limit),
        "x-harness-validation": manifest.validation,
        "x-harness-transforms": _header(manifest.transforms),
        "x-harness-omitted": _header(omitted),
        "x-harness-call-id": manifest.call_id,
        "x-harness-cache-break": (manifest.cache_break or "none")
        .encode("ascii", "backslashreplace")
        .decode()[:1_000],
        "x-harness-cache-expected": (
            "unknown" if manifest.cache_expected is None else str(manifest.cache_expected)
        ),
    }


def verdict_header(headers: Mapping[str, str], response: object) -> str:
    """Return ``x-harness-cache-verdict`` for a response to the request ``headers`` describe.

    The verdict of `harness.accounting.cache_verdict` from the stashed manifest headers and
    the usage litellm's response carries; ``none`` when the provider reports no cached tokens.
    """
    expected = headers.get("x-harness-cache-expected", "unknown")
    estimated = headers.get("x-harness-estimated-tokens", "")
    verdict = cache_verdict(
        int(expected) if expected.isdigit() else None,
        broke=headers.get("x-harness-cache-break", "none") != "none",
        usage=usage_from(getattr(response, "usage", None)),
        estimated=int(estimated) if estimated.isdigit() else 0,
    )
    return verdict or "none"


OPERATOR_TERMS: Final = (
    ("ContextPolicy.max_input_tokens", f"callback_settings.{SETTINGS_KEY}.max_input_tokens"),
    ("ContextPolicy(max_input_tokens=...)", f"callback_settings.{SETTINGS_KEY}.max_input_tokens"),
    (
        "LiteLLMClient(..., context_window=...) (the drop-in takes context_window=)",
        "the deployment's model_info.max_input_tokens in model_list",
    ),
    ("ContextPolicy.reserve_output", f"callback_settings.{SETTINGS_KEY}.reserve_output"),
    ("ContextPolicy.safety_margin", f"callback_settings.{SETTINGS_KEY}.safety_margin"),
)
"""Python settings a harness message names, and what a proxy operator sets instead."""
OPERATOR_FIX: Final = {
    "ContextBudgetExceeded": (
        "the client: send fewer or shorter messages or tools; the proxy operator: raise "
        f"callback_settings.{SETTINGS_KEY}.max_input_tokens, lower reserve_output or "
        "safety_margin there, or set the deployment's model_info.max_input_tokens to its "
        "real window (config.yaml)"
    ),
    "ConfigurationError": (
        f"the proxy operator: fix callback_settings.{SETTINGS_KEY} (reserve_output, "
        "safety_margin, max_input_tokens) or the deployment's model_info in config.yaml"
    ),
    "SourceError": (
        f"the proxy operator: check the sources of callback_settings.{SETTINGS_KEY}.stack"
    ),
    "StateConflict": "the client: send the request again",
}
"""Who fixes each refusal, and how, for the ``fix`` field of the HTTP error."""


def _http_error(error: InvalidInputError | ContextBuildError | ConfigurationError) -> Exception:
    """Return the proxy's HTTP error for a request the stack could not prepare.

    The detail speaks to HTTP clients and proxy operators: Python settings a harness message
    names become the ``callback_settings`` keys (`OPERATOR_TERMS`), and ``fix`` says who
    changes what (`OPERATOR_FIX`).
    """
    status = (
        409
        if isinstance(error, StateConflict)
        else 500
        if isinstance(error, SourceError | ConfigurationError)
        else 400
    )
    text = str(error)
    for python, operator in OPERATOR_TERMS:
        text = text.replace(python, operator)
    detail = {"error": f"context-harness: {text}", "type": type(error).__name__}
    fix = next(
        (hint for cls in type(error).__mro__ if (hint := OPERATOR_FIX.get(cls.__name__))), None
    )
    if fix is not None:
        detail["fix"] = fix
    return _fastapi_error(status, detail)


def _unprepared_error(call_type: str) -> Exception:
    """Return the HTTP 400 for a request on an API the hook does not prepare."""
    api = UNPREPARED_CALLS[call_type]
    detail = {
        "error": (
            f"context-harness: this proxy prepares Chat Completions (/v1/chat/completions) "
            f"only, and {api} would pass unfitted and unrecorded. Send the request as Chat "
            "Completions (OpenAI Agents SDK: set_default_openai_api('chat_completions'), or "
            "OpenAIChatCompletionsModel); or the proxy operator sets "
            f"callback_settings.{SETTINGS_KEY}.unprepared_apis: pass to forward it as sent"
        ),
        "type": "UnpreparedAPI",
        "fix": "the client: use Chat Completions",
    }
    return _fastapi_error(400, detail)


def _fastapi_error(status: int, detail: dict[str, str]) -> Exception:
    http_exception: Any = importlib.import_module("fastapi").HTTPException
    made: Exception = http_exception(status_code=status, detail=detail)
    return made


def _header(values: Sequence[str]) -> str:
    text = msgspec.json.encode([str(value) for value in values]).decode()
    return text.encode("ascii", "backslashreplace").decode()[:4_000]


def _stack_from(path: str) -> list[Middleware]:
    """Return the middleware list the function at ``module.function`` builds.

    Raises:
        ConfigurationError: the path does not import or does not return a list.
    """
    module_name, _, name = path.rpartition(".")
    try:
        factory: Callable[[], Any] = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(
            f"callback_settings.{SETTINGS_KEY}.stack: cannot import {path!r} ({exc}); "
            "name a function as module.function on the proxy's PYTHONPATH"
        ) from exc
    stack = factory()
    if not isinstance(stack, list | tuple):
        raise ConfigurationError(
            f"callback_settings.{SETTINGS_KEY}.stack: {path}() returned "
            f"{type(stack).__name__}; it must return the middleware list"
        )
    return list(stack)


def _proxy_settings() -> ProxyHookSettings:
    """Return the hook's options from the proxy's ``callback_settings`` (set before callbacks load).

    Outside a proxy (or without the section) ``HARNESS_PROXY_STORE`` may still name the store.
    """
    found = getattr(load_litellm(), "callback_settings", None)
    raw = found.get(SETTINGS_KEY) if isinstance(found, Mapping) else None
    if raw is None:
        raw = {"store": os.environ.get("HARNESS_PROXY_STORE")}
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"callback_settings.{SETTINGS_KEY} in the proxy's config.yaml must be a mapping "
            f"of options ({', '.join(ProxyHookSettings.__struct_fields__)})"
        )
    return ProxyHookSettings.parse(raw)


_INSTANCE: list[HarnessProxyHook] = []


def __getattr__(name: str) -> HarnessProxyHook:
    """Build ``proxy_handler_instance`` on first access, not at import.

    ``proxy_handler_instance`` is the hook for ``config.yaml`` (``callbacks:
    ["providers.proxy_hook.proxy_handler_instance"]``), configured from ``callback_settings:
    harness:`` (`ProxyHookSettings`) and warmed up (`providers.proxy_warm_up`) when the
    proxy loads its config; importing this module for `HarnessProxyHook` builds nothing.
    """
    if name != "proxy_handler_instance":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _INSTANCE:
        _INSTANCE.append(HarnessProxyHook.from_settings(_proxy_settings()))
    return _INSTANCE[0]
