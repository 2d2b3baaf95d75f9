"""`HarnessMiddleware`: the stack as a LangChain v1 ``AgentMiddleware`` (sync and async).

A ``create_agent(model, tools, middleware=[HarnessMiddleware()])`` agent gets, before every
model call, what `harness.acompletion` gives a litellm app: System from its system message,
tool results offloaded, the budget fitted, the history compacted (summaries from the
agent's own model, cached by a hash of what they replace, per user), pairs validated, and a
manifest (``policy=ContextPolicy(observer=...)``). LangGraph keeps the conversation, so the
middleware is stateless: it rewrites the request LangChain's model receives, never the
graph's state.

LangChain's contracts hold through it:

- ``ainvoke``/``astream`` run the stack on the agent's loop (``awrap_model_call``);
  ``invoke``/``stream`` run the same async core through one bridge (``wrap_model_call``):
  a private event loop in the calling thread, or in a worker thread when the caller is
  itself inside a running loop; LangChain's sync handler then runs in a worker thread.
- Summary requests are tagged ``nostream`` with ``lc_source="summarization"`` metadata, as
  LangChain's ``SummarizationMiddleware`` tags its own: ``stream_mode="messages"`` carries
  the agent's answer only.
- LangChain's model call is the innermost layer of the stack, so a ``ContextOverflowError``
  it raises is one `OverflowRetry` handles (compaction forced, sent once more); an overflow
  that persists reaches the caller as LangChain's own exception.
- Calls LangChain could not parse (``invalid_tool_calls``) travel as calls, paired with the
  error result LangChain gives them; a call left without a result by an interrupted run gets
  one (``interrupted_text``, ``status="error"``) before the next turn, as deepagents'
  ``PatchToolCallsMiddleware`` gives it — on the request, not in the graph's state.
- Messages the stack leaves as they were are the very objects LangChain gave
  (``additional_kwargs`` such as ``reasoning_content`` survive); rewritten ones are copies
  keeping ``id``, ``artifact``, ``status`` and metadata; summaries carry
  ``additional_kwargs["lc_source"] == "summarization"``; a System message whose text the
  stack keeps is passed as is (content blocks with ``cache_control`` included).
- A large tool result is offloaded to a workspace (``workspace=``, default: a private
  in-memory one) under its user's and conversation's key, and the agent gets the tool its
  preview names: ``read_file`` (in ``HarnessMiddleware.tools``, which ``create_agent``
  adds), which reads only the calling conversation's files. A trimmed result names the file
  holding its original the same way (`harness.adapters._langchain_reading`). A request that
  does not offer that tool (the agent has its own ``read_file``) keeps results inline. The
  model is sent the tool's schema only once the conversation has such a file (a preview
  in the request, or files in the conversation's folder), and on every request after that:
  a conversation whose results fit never pays for it. (The stack's count of the request
  includes the schema either way, so the budget never depends on that choice.)

Install with ``pip install '.[langchain]'`` from a checkout; this module is imported only
when used.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware import ModelRequest as LCModelRequest
from langchain_core.exceptions import ContextOverflowError as LCContextOverflowError
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AnyMessage, convert_to_messages
from langchain_core.runnables import RunnableConfig
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.constants import TAG_NOSTREAM

from harness.adapters._conversion import split_messages, tools_from_openai
from harness.adapters._langchain_messages import (
    INTERRUPTED_CALL_TEXT,
    SUMMARY_SOURCE,
    back_to_langchain,
    system_back,
    to_openai,
    with_interrupted_results,
)
from harness.adapters._langchain_reading import (
    CONVERSATION,
    ConversationScope,
    conversation_of,
    langchain_read_tool,
    readable_trims,
    reader_needed,
)
from harness.adapters.completion import _Call, _through_stack
from harness.errors import ContextOverflowError, ProviderError
from harness.messages import Message, ToolCall
from harness.policy import ContextPolicy
from harness.request import ModelRequest, ModelResponse
from harness.sessions.store import SessionStore
from harness.types import Middleware
from harness.workspace import Workspace
from middleware import ToolResultOffload, default_stack
from middleware.tool_result_offload import DEFAULT_FOLDER

try:
    import sniffio
except ImportError:  # pragma: no cover - anyio works without it
    sniffio = None  # type: ignore[assignment]

try:  # newer langchain: also keeps internal calls out of the v2 stream's ``run.messages``
    from langchain.agents.middleware.internal_call_transformer import (
        InternalCallTransformer,
        internal_call_metadata,
    )

    _INTERNAL: dict[str, Any] = internal_call_metadata()
    _TRANSFORMERS: tuple[Any, ...] = (InternalCallTransformer,)
except ImportError:  # pragma: no cover - older langchain
    _INTERNAL, _TRANSFORMERS = {}, ()

__all__ = ["HarnessMiddleware", "LangChainModelClient", "model_name"]

T = TypeVar("T")
_LOG = logging.getLogger(__name__)


def summary_config() -> RunnableConfig:
    """Return the config of a summary call: not streamed, marked as LangChain marks its own."""
    return {"tags": [TAG_NOSTREAM], "metadata": {"lc_source": SUMMARY_SOURCE, **_INTERNAL}}


class LangChainModelClient:
    """A LangChain chat model as our model client (for summary requests).

    Its calls run with `summary_config`: LangGraph does not stream them, and they carry
    ``lc_source="summarization"`` as LangChain's own summary calls do. A LangChain
    ``ContextOverflowError`` becomes ours (`harness.errors.ContextOverflowError`), any other
    failure a `harness.errors.ProviderError`: compaction then leaves the early turns out of
    that one request and goes on, as LangChain's ``SummarizationMiddleware`` goes on with an
    error text for a summary.

    Args:
        chat: the LangChain chat model.
        name: the model name for estimation (default: the model's own name).
    """

    def __init__(self, chat: BaseChatModel, name: str | None = None) -> None:
        self.chat = chat
        self.model = name or model_name(chat)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` through the LangChain model and return its answer."""
        rendered = [m.to_openai() for m in request.render()]
        try:
            answer = await self.chat.ainvoke(convert_to_messages(rendered), config=summary_config())
        except LCContextOverflowError as exc:
            raise _overflow(exc, self.model) from exc
        except Exception as exc:  # the provider boundary: any failure of the model's package
            raise ProviderError(
                f"the LangChain model {self.model!r} failed: {type(exc).__name__}: {exc}",
                provider="langchain",
                model=self.model,
            ) from exc
        calls = getattr(answer, "tool_calls", None) or ()
        return ModelResponse(
            message=Message.assistant(
                answer.text if isinstance(answer.text, str) else str(answer.content),
                tool_calls=[
                    ToolCall(id=str(c.get("id") or ""), name=c["name"], arguments=_json(c))
                    for c in calls
                ],
            ),
            model=self.model,
        )

    def context_window(self, model: str | None = None) -> int | None:
        """Return the model's input window from its LangChain profile, when it has one."""
        profile = getattr(self.chat, "profile", None)
        window = profile.get("max_input_tokens") if isinstance(profile, dict) else None
        return window if isinstance(window, int) and window > 0 else None


class HarnessMiddleware(AgentMiddleware):
    """Run the context-harness stack on every model request of a LangChain v1 agent.

    Args:
        stack: the middleware list (default: `middleware.default_stack()`).
        policy: budget, estimator and observer (default: `ContextPolicy()`).
        store: where cached summaries live (default: an in-process LRU).
        user_of: returns whose request it is; cached summaries and offloaded results are
            scoped by it. It is called with LangChain's ``ModelRequest`` for a model call
            and with its ``ToolCallRequest`` for the ``read_file`` tool — both carry
            ``.runtime`` (``.runtime.context``) and ``.state``. Default: everyone is ``""``.
        agent_id: the agent id for manifests and the cache.
        interrupted_text: the content of the result a call left without one gets (an
            interrupted run continued with a new turn), with ``{name}`` and ``{id}`` filled
            in; ``None`` leaves such calls to `PairValidation` (refused in its default mode).
        workspace: where large tool results are offloaded and trimmed ones kept whole, for
            ``read_file`` (a `Workspace` or its location; default: a private in-memory one
            of this middleware, which lives as long as it in this process).
        read_tool: give the agent ``read_file``; ``False`` for a model without tool calling:
            then nothing is offloaded to a file (a large result is cut to an inline head and
            tail that says the middle is not available) and a trimmed result's note says its
            rest is not available to the agent.

    Attributes:
        tools: the tools this middleware gives the agent (``read_file``).
    """

    transformers = _TRANSFORMERS

    def __init__(
        self,
        *,
        stack: Sequence[Middleware] | None = None,
        policy: ContextPolicy | None = None,
        store: SessionStore | str | None = None,
        user_of: Callable[[Any], str] | None = None,
        agent_id: str = "langchain",
        interrupted_text: str | None = INTERRUPTED_CALL_TEXT,
        workspace: Workspace | str | None = None,
        read_tool: bool = True,
    ) -> None:
        super().__init__()
        self.stack = list(stack) if stack is not None else None
        self.policy = policy
        self.store = store
        self.user_of = user_of
        self.agent_id = agent_id
        self.interrupted_text = interrupted_text
        self.workspace = (
            workspace
            if isinstance(workspace, Workspace)
            else Workspace(workspace)
            if workspace is not None
            else Workspace.private()
        )
        layers = self.stack if self.stack is not None else default_stack()
        offload = next((m for m in layers if isinstance(m, ToolResultOffload)), None)
        self._folder = offload.folder if offload is not None else DEFAULT_FOLDER
        self._reading = (
            ((offload.workspace if offload is not None else None) or self.workspace)
            if read_tool
            else None
        )
        """The workspace ``read_file`` reads (the offload layer's own, else ours), if any."""
        self._layers: list[Middleware] = [ConversationScope(), *layers]
        self._warned = False
        self.tools = (
            [
                langchain_read_tool(
                    self._reading, folder=self._folder, agent_id=agent_id, user_of=user_of
                )
            ]
            if self._reading is not None
            else []
        )

    async def awrap_model_call(
        self,
        request: LCModelRequest,
        handler: Callable[[LCModelRequest], Awaitable[Any]],
    ) -> Any:
        """Prepare ``request`` with the stack, then let LangChain's model answer it."""
        return await self._prepare_and_send(request, handler)

    def wrap_model_call(
        self,
        request: LCModelRequest,
        handler: Callable[[LCModelRequest], Any],
    ) -> Any:
        """`awrap_model_call` for ``invoke``/``stream``: the async core, run to completion."""

        async def send(prepared: LCModelRequest) -> Any:
            return await anyio.to_thread.run_sync(handler, prepared)

        return run_sync(lambda: self._prepare_and_send(request, send))

    def _reader_in(self, request: LCModelRequest) -> Workspace | None:
        """Return the workspace ``read_file`` reads, if this request offers that tool.

        Not when the agent has a ``read_file`` of its own (LangChain keeps one tool per name,
        the agent's), nor when a middleware took ours out of this request: then large
        results stay inline, and this is logged once.
        """
        if self._reading is None:
            return None
        if any(t is self.tools[0] for t in request.tools):
            return self._reading
        if not self._warned:
            self._warned = True
            _LOG.warning(
                "this agent's requests do not offer HarnessMiddleware's read_file (the agent "
                "has a tool of that name, or a middleware removed it), so large tool results "
                "are cut to an inline head and tail instead of offloaded; rename your "
                "read_file tool, or pass HarnessMiddleware(read_tool=False) to say so"
            )
        return None

    async def _prepare_and_send(
        self,
        request: LCModelRequest,
        send: Callable[[LCModelRequest], Awaitable[Any]],
    ) -> Any:
        """Run the stack with LangChain's model call as its innermost layer."""
        originals: list[AnyMessage] = list(request.messages)
        if self.interrupted_text is not None:
            originals = with_interrupted_results(originals, self.interrupted_text)
        dicts: list[dict[str, Any]] = []
        if request.system_message is not None:
            dicts.append({"role": "system", "content": request.system_message.text})
        converted_dicts = to_openai(originals)
        dicts.extend(converted_dicts)
        # A SystemMessage in the graph's messages joins System, as a system dict does.
        in_history = [
            o
            for o, d in zip(originals, converted_dicts, strict=True)
            if d.get("role") not in ("system", "developer")
        ]
        user_id = self.user_of(request) if self.user_of is not None else ""
        conversation = conversation_of(request.runtime, request.messages)
        scope = f"{user_id}\0{self.agent_id}"  # as the stateless call scopes its conversions
        _, history = split_messages(dicts, scope=scope)
        by_id = {m.id: o for m, o in zip(history, in_history, strict=True)}
        converted = {m.id: m for m in history}
        client = LangChainModelClient(request.model)
        reading = self._reader_in(request)

        async def langchain_model(
            prepared: ModelRequest, stream: bool
        ) -> tuple[Any, ModelResponse]:
            rendered = prepared.render()
            system = rendered.pop(0).text if rendered and rendered[0].role == "system" else ""
            rendered = await readable_trims(
                rendered, converted, workspace=reading, folder=self._folder,
                user_id=user_id, agent_id=self.agent_id, session_id=conversation,
                estimator=prepared.estimator,
            )  # fmt: skip
            sent = request.override(
                messages=back_to_langchain(rendered, by_id),
                system_message=system_back(system, request.system_message),
            )
            if reading is not None and not await reader_needed(
                rendered, reading, folder=self._folder, user_id=user_id,
                agent_id=self.agent_id, session_id=conversation,
            ):  # fmt: skip
                sent = sent.override(tools=[t for t in sent.tools if t is not self.tools[0]])
            try:
                answer = await send(sent)
            except LCContextOverflowError as exc:
                raise _overflow(exc, client.model) from exc
            return answer, ModelResponse(message=Message(role="assistant", content=""))

        call = _Call(client=client, send=langchain_model, stream=True)
        schemas, _ = tools_from_openai(
            t if isinstance(t, dict) else convert_to_openai_tool(t) for t in request.tools
        )
        token = CONVERSATION.set((conversation, self.workspace if reading is not None else None))
        try:
            await _through_stack(
                call, client.model, dicts, schemas, dict(request.model_settings) or None,
                stack=self._layers, policy=self.policy, session_id=None, user_id=user_id,
                store=self.store, agent_id=self.agent_id,
            )  # fmt: skip
        except ContextOverflowError as exc:
            native = _langchain_overflow(exc)
            if native is None:
                raise
            native.add_note(f"context-harness: {exc}")
            raise native from native.__cause__  # LangChain's error, as without the harness
        finally:
            CONVERSATION.reset(token)
        return call.raw


def run_sync(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` to completion from synchronous code (the one sync bridge of this module).

    In a thread without a running event loop (LangGraph's sync executor) ``work`` runs on a
    private loop there; under a running loop (``invoke`` called from async code) it runs on
    a private loop in a worker thread. Context variables (LangChain's callbacks and config)
    go with it either way.
    """
    context = contextvars.copy_context()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return context.run(_on_a_new_loop, work)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-sync") as pool:
        return pool.submit(context.run, _on_a_new_loop, work).result()


def _on_a_new_loop(work: Callable[[], Awaitable[T]]) -> T:
    # A context copied from async code (LangGraph copies it into its executor's threads)
    # still names that code's library; no loop of it runs in this thread.
    if sniffio is not None:
        sniffio.current_async_library_cvar.set(None)
    return anyio.run(work)


def _overflow(exc: LCContextOverflowError, model: str) -> ContextOverflowError:
    return ContextOverflowError(
        f"the LangChain model {model!r} reports a context overflow: {exc}",
        provider="langchain",
    )


def _langchain_overflow(exc: BaseException) -> LCContextOverflowError | None:
    """Return LangChain's overflow error behind ``exc``, if one is."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, LCContextOverflowError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _json(call: Any) -> str:
    return json.dumps(call.get("args") or {})


def model_name(chat: BaseChatModel) -> str:
    """Return a LangChain chat model's name (``model_name``, ``model``, else its class)."""
    for attribute in ("model_name", "model"):
        value = getattr(chat, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(chat).__name__
