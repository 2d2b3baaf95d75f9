"""The systems the benchmarks compare: our default stack, LangChain's middleware, litellm.

- **ours**: `our_stack` (``middleware.default_stack()``, optionally without ``Compaction``)
  and `PrepClock`, the timing middleware that measures one round's preparation — from the
  outermost middleware to the manifest observer.
- **LangChain**: `LangChainPeer` — ``SummarizationMiddleware.before_model`` then
  ``ContextEditingMiddleware(edits=[ClearToolUsesEdit()]).wrap_model_call`` with a handler
  that records what the model would receive, the two hooks a LangChain v1 agent runs before
  each model call, on LangChain messages that carry ids (as LangGraph's state holds them).
- **litellm**: `trim_messages` (``litellm.utils.trim_messages``) on OpenAI dicts.

Every benchmark that compares against a peer builds it here, so the peers are set up the
same way everywhere; the message conversions between the systems live here too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.workloads import FIXED_SUMMARY, call_arguments
from harness.manifest import ContextManifest
from harness.messages import Message, ToolCall
from harness.request import ModelRequest, ModelResponse
from harness.types import Handler, Middleware


# ------------------------------------------------------------------------------- ours
def our_stack(*, compaction: bool | Middleware = True, **kwargs: Any) -> list[Middleware]:
    """Return ``middleware.default_stack(**kwargs)``: ``compaction`` is a `Compaction` to use,
    ``True`` for the default one, or ``False`` for none."""
    from middleware import default_stack

    if not isinstance(compaction, bool):
        kwargs["compaction"] = compaction
    stack = list(default_stack(**kwargs))
    if compaction is False:
        stack = [m for m in stack if type(m).__name__ != "Compaction"]
    return stack


def has_compaction() -> bool:
    """Return whether the default stack has a ``Compaction`` layer."""
    return any(type(m).__name__ == "Compaction" for m in our_stack())


class PrepClock:
    """Times preparation: from the outermost middleware to the manifest, per round.

    Use the instance as the first middleware of the stack and its `observe` as the policy's
    manifest observer. Rounds are keyed by run id (one agent call), so concurrent sessions
    are timed independently; a retried round counts once (its first preparation).
    """

    def __init__(self) -> None:
        self._started: dict[str, float] = {}
        self.samples: list[float] = []
        """Preparation seconds of every agent round, in order of completion."""
        self.by_session: dict[str, list[float]] = {}
        """The same samples grouped by session id."""
        self.ends: list[float] = []
        """When each agent round's preparation ended: the gaps are whole rounds."""

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Stamp the start of preparation and pass the request on."""
        self._started[request.ids.run_id] = time.perf_counter()
        return await call_next(request)

    def observe(self, manifest: ContextManifest) -> None:
        """Stamp the end of preparation (the manifest is built just before the client call)."""
        end = time.perf_counter()
        if manifest.purpose != "agent":
            return  # compaction's summary requests report manifests too; not a round
        start = self._started.pop(manifest.run_id, None)
        if start is None:
            return
        self.ends.append(end)
        self.samples.append(end - start)
        self.by_session.setdefault(manifest.session_id, []).append(end - start)


# -------------------------------------------------------------------------- LangChain
class LangChainPeer:
    """LangChain v1's summarisation and context-editing hooks, driven as its agent runs them.

    Args:
        system: the system prompt (LangChain keeps it outside the message state).
        trigger: ``SummarizationMiddleware``'s trigger (one or a list of conditions).
        keep: what ``SummarizationMiddleware`` keeps after summarising.
        summarizer: returns the summary of the messages it is given (default: the fixed
            summary every system gets in the benchmarks).
        **options: other ``SummarizationMiddleware`` settings (``trim_tokens_to_summarize``).
    """

    def __init__(
        self,
        system: str,
        *,
        trigger: Any,
        keep: Any,
        summarizer: Callable[[list[Any]], str] | None = None,
        **options: Any,
    ) -> None:
        from langchain.agents.middleware import (
            ClearToolUsesEdit,
            ContextEditingMiddleware,
            SummarizationMiddleware,
        )
        from langchain.agents.middleware.types import ModelRequest as LCRequest
        from langchain.agents.middleware.types import ModelResponse as LCResponse
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, SystemMessage

        self.model = GenericFakeChatModel(messages=iter(()))
        self.summarization = SummarizationMiddleware(
            self.model,
            trigger=trigger,
            keep=keep,
            summarizer=summarizer or (lambda messages: FIXED_SUMMARY),
            **options,
        )
        self.editing = ContextEditingMiddleware(edits=[ClearToolUsesEdit()])
        self.system = SystemMessage(content=system)
        self._request_type = LCRequest
        self._canned = LCResponse(result=[AIMessage(content="ok")])
        self.sent: list[Any] = []
        """The messages the last round would have sent to the model."""

    def round(self, messages: list[Any]) -> list[Any]:
        """Run both hooks on the state ``messages`` (summarised in place); return what is sent."""
        update = self.summarization.before_model({"messages": messages}, None)  # type: ignore[arg-type]
        if update is not None:
            messages[:] = update["messages"][1:]
        request = self._request_type(
            model=self.model, messages=messages, system_message=self.system
        )
        self.editing.wrap_model_call(request, self._handler)
        return self.sent

    def summary_prompt(self, messages: list[Any]) -> str:
        """Return the prompt LangChain's own summariser would send for ``messages``."""
        return str(self.summarization._format_summary_prompt(messages))

    def _handler(self, request: Any) -> Any:
        self.sent = list(request.messages)
        return self._canned


# ---------------------------------------------------------------------------- litellm
def trim_messages() -> Callable[..., Any]:
    """Return ``litellm.utils.trim_messages`` (imported offline: the local cost map)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.utils import trim_messages as trim

    return trim


# ------------------------------------------------------------------------ conversions
def to_openai(messages: Sequence[Message], system: str = "") -> list[dict[str, Any]]:
    """Return OpenAI chat dicts, the system prompt first when given."""
    out = [{"role": "system", "content": system}] if system else []
    out.extend(m.to_openai() for m in messages)
    return out


def to_langchain(messages: Sequence[Message]) -> list[Any]:
    """Return LangChain messages with the same ids (as LangGraph's state would hold them)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[Any] = []
    for m in messages:
        text = m.text
        if m.role == "user":
            out.append(HumanMessage(content=text, id=m.id))
        elif m.role == "system":
            out.append(SystemMessage(content=text, id=m.id))
        elif m.role == "tool":
            out.append(
                ToolMessage(content=text, tool_call_id=m.tool_call_id or "", name=m.name, id=m.id)
            )
        else:
            calls = [
                {
                    "name": c.name,
                    "args": call_arguments(c.arguments),
                    "id": c.id,
                    "type": "tool_call",
                }
                for c in m.tool_calls
            ]
            out.append(AIMessage(content=text, tool_calls=calls, id=m.id))
    return out


def from_langchain(messages: Sequence[Any], originals: dict[str, Message]) -> list[Message]:
    """Return harness messages for LangChain ones: the original where unchanged, else a conversion.

    Keeping the originals keeps their token counts cached (and their exact argument text).
    """
    out: list[Message] = []
    for lc in messages:
        original = originals.get(lc.id or "")
        text = lc.content if isinstance(lc.content, str) else _lc_text(lc.content)
        if original is not None and original.text == text:
            calls = getattr(lc, "tool_calls", None) or []
            if all(
                call_arguments(c.arguments) == lc_call.get("args")
                for c, lc_call in zip(original.tool_calls, calls, strict=False)
            ):
                out.append(original)
                continue
        kind = lc.type
        if kind == "human":
            out.append(Message.user(text))
        elif kind == "system":
            out.append(Message.system(text))
        elif kind == "tool":
            out.append(Message.tool(lc.tool_call_id, text, name=lc.name))
        else:
            calls_out = [
                ToolCall(
                    id=c.get("id") or "", name=c["name"], arguments=json.dumps(c.get("args") or {})
                )
                for c in (getattr(lc, "tool_calls", None) or [])
            ]
            out.append(Message.assistant(text or None, tool_calls=calls_out))
    return out


def _lc_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


# ------------------------------------------------------------------ observation masking
MASK_TEXT = "Old environment output: ({lines} lines omitted)"
"""SWE-agent's placeholder for an observation older than the last M (``LastNObservations``)."""


def mask_observations(
    messages: Sequence[Message], keep: int, observations: frozenset[str] | None = None
) -> list[Message]:
    """Return ``messages`` with all but the last ``keep`` observations replaced by one line.

    SWE-agent's observation masking ("The Complexity Trap", 2025): the newest ``keep``
    observations verbatim, each older one a one-line placeholder (a tool result stays
    paired with its call). Observations are the tool results, and the messages whose ids
    are in ``observations`` (SWE-agent's runs without function calling send the
    environment's output as a user message).
    """
    chosen = observations or frozenset()
    tools = [i for i, m in enumerate(messages) if m.role == "tool" or m.id in chosen]
    old = set(tools[: max(0, len(tools) - keep)])
    return [
        m.replace(content=MASK_TEXT.format(lines=m.text.count("\n") + 1), id=f"{m.id}-masked")
        if i in old
        else m
        for i, m in enumerate(messages)
    ]
