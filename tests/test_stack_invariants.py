"""Invariants of the whole default stack over random histories (hypothesis).

After the stack: every tool result has its call and every call its result, System and
required blocks are present, the newest user message is present, and the request fits the
budget — or a typed error is raised. Running the stack again on its own output (what the
agent does next round, after committing) changes the history no further.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import (
    AgentState,
    ContextBlock,
    ContextBudgetExceeded,
    ContextPolicy,
    Message,
    ModelRequest,
    ModelResponse,
    RequestIds,
    RunScope,
    SystemPart,
    ToolCall,
    ToolSchema,
    Workspace,
    compose,
    estimate_request,
)
from middleware import context_source, default_stack
from middleware.context_sources import ContextRequest
from providers import ScriptedModel

WORDS = [
    "alpha",
    "def f(x):",
    "Traceback (most recent call last):",
    "0xdeadbeef",
    "日志错误",
    "路径/a/b.py",
    "{}",
]


Spec = tuple[str, tuple[str, ...]]


@st.composite
def contents(draw: st.DrawFn) -> Spec:
    """A compact description of a content (expanded by `text`), so failures print small."""
    kind = draw(st.sampled_from(["empty", "short", "long", "huge", "cjk"]))
    return kind, tuple(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)))


def text(spec: Spec, fallback: str = "") -> str:
    kind, words = spec
    if kind == "empty":
        return fallback
    if kind == "cjk":
        return "上下文管理与工具调用结果。" * (50 * len(words))
    repeat = {"short": 1, "long": 300, "huge": 12_000}[kind]
    return " ".join(words) * repeat


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, Spec, int]]:
    """Valid agent histories as steps: ("user"|"text"|"tools", content, number of calls)."""
    steps = [("user", draw(contents()), 0)]
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["tools", "tools", "text", "user"]))
        steps.append((kind, draw(contents()), draw(st.integers(1, 3)) if kind == "tools" else 0))
    return steps


def build(steps: list[tuple[str, Spec, int]]) -> list[Message]:
    out: list[Message] = []
    for turn, (kind, spec, calls) in enumerate(steps):
        if kind == "user":
            out.append(Message.user(text(spec, "next")))
        elif kind == "text":
            out.append(Message.assistant(text(spec)))
        else:
            made = [
                ToolCall(
                    id=f"c{turn}_{k}",
                    name=("shell", "read_file", "grep")[(turn + k) % 3],
                    arguments=json.dumps({"cmd": text(spec)[:5000]}),
                )
                for k in range(calls)
            ]
            out.append(Message.assistant(None, tool_calls=made))
            out.extend(
                Message.tool(c.id, text(spec) if k % 2 == 0 else "ok", name=c.name)
                for k, c in enumerate(made)
            )
    return out


def pairs_valid(history: Sequence[Message]) -> bool:
    open_calls: set[str] = set()
    for message in history:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            return False
        open_calls = {c.id for c in message.tool_calls}
    return not open_calls


async def _required_source(request: ContextRequest) -> list[ContextBlock]:
    return [
        ContextBlock.runtime("must", "REQUIRED-FACT", required=True),
        ContextBlock.reference("nice", "optional reference " * 200, priority=1),
    ]


def _run(
    history: list[Message], limit: int, workspace: Workspace
) -> tuple[ModelRequest | None, Exception | None, ModelRequest | None]:
    seen: list[ModelRequest] = []

    async def terminal(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    stack = default_stack(sources=[context_source("facts", _required_source, required=True)])
    handler = compose(stack, terminal)
    model = ScriptedModel(window=32_000)

    def request_for(h: Sequence[Message]) -> ModelRequest:
        state = AgentState(session_id="s", full_history=list(history), working_history=list(h))
        return ModelRequest(
            model="scripted",
            ids=RequestIds(session_id="s"),
            system=(SystemPart(name="prompt", text="SYSTEM-RULES"),),
            history=tuple(h),
            tools=(ToolSchema(name="shell", description="run a command"),),
            policy=ContextPolicy(max_input_tokens=limit).resolve("scripted"),
            input_limit=limit,
            state=state,
            state_version=state.version,
            run=RunScope(client=model, workspace=workspace),
        )

    async def main() -> tuple[ModelRequest | None, Exception | None, ModelRequest | None]:
        try:
            await handler(request_for(history))
        except ContextBudgetExceeded as exc:
            return None, exc, None
        first = seen[-1]
        await handler(request_for(first.history))
        return first, None, seen[-1]

    return anyio.run(main)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(histories(), st.sampled_from([2_500, 6_000, 20_000, 60_000]))
def test_default_stack_invariants_and_idempotence(
    steps: list[tuple[str, Spec, int]], limit: int
) -> None:
    history = build(steps)
    with tempfile.TemporaryDirectory() as folder:
        first, error, second = _run(history, limit, Workspace(folder))
    if error is not None:
        # A refusal must be justified: what may not be dropped is really over the limit.
        assert isinstance(error, ContextBudgetExceeded)
        assert error.limit == limit and error.required_tokens > limit
        return
    assert first is not None and second is not None
    assert pairs_valid(first.history)
    assert first.system[0].text == "SYSTEM-RULES"
    assert any(b.text == "REQUIRED-FACT" for b in first.blocks)
    newest_user = next(m for m in reversed(history) if m.role == "user")
    assert any(
        m.id == newest_user.id or m.meta("origin_id") == newest_user.id for m in first.history
    )
    assert estimate_request(first) <= limit
    # Idempotence: the committed output goes through the stack unchanged.
    assert [m.id for m in second.history] == [m.id for m in first.history]
    changing = (
        "tool_result_offload",
        "tool_output_trim",
        "history_compaction",
        "tool_args_truncate",
    )
    assert not [t for t in second.transforms if t.startswith(changing)]
