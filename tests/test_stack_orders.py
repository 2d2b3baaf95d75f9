"""Every single removal and every adjacent swap of the default stack, on a replay that overflows.

The replay is a tool-using session that outgrows its budget (so offload, trimming and
compaction all have work) and whose provider rejects one request as too long. Each variant
of the default stack either recovers — every request the model received has valid pairs and
fits its limit by exact count, and the call ends with the model's reply — or is refused when
it is built, with a message that names the constraint. Removing a concern may only fail
loudly, with the typed error of exactly that concern's job (no OverflowRetry: the provider's
overflow reaches the caller; no Compaction: a history over budget is refused, not sent).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence

import anyio
import pytest

from harness import (
    ConfigurationError,
    ContextBudgetExceeded,
    ContextOverflowError,
    ContextPolicy,
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
    RequestIds,
    RuntimeContext,
    compose,
)
from harness.accounting import estimate_request
from harness.state import AgentState
from harness.tokens import exact_for_family
from harness.types import Middleware
from middleware import (
    BudgetFit,
    ContextSources,
    FragmentEditor,
    TaskState,
    WorkspaceMaterials,
    default_stack,
    enable_task_list,
)
from middleware._history import check_pairs
from providers import ScriptedModel
from providers.scripted import Reply

EXACT = exact_for_family("o200k")
LIMIT = 6_000
ROUNDS = 14
OVERFLOW_ON = 9  # the agent request the provider rejects once


def grep(pattern: str) -> str:
    """Search the code base.

    Args:
        pattern: what to look for.
    """
    return "".join(f"src/module_{i}.py:{i}: {pattern} found in a line of code\n" for i in range(70))


def script() -> list[Reply]:
    replies: list[Reply] = []
    for i in range(ROUNDS):
        if i == OVERFLOW_ON:
            replies.append(
                ContextOverflowError("prompt is too long", provider="scripted", status=400)
            )
        replies.append(ScriptedModel.tool_call("grep", {"pattern": f"needle{i}"}))
    replies.append("finished")
    return replies


def variants() -> list[tuple[str, list[Middleware]]]:
    base = default_stack()
    names = [type(m).__name__ for m in base]
    out: list[tuple[str, list[Middleware]]] = [("default", base)]
    for i, name in enumerate(names):
        out.append((f"without {name}", [m for j, m in enumerate(default_stack()) if j != i]))
    for i in range(len(names) - 1):
        swapped = default_stack()
        swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
        out.append((f"swap {names[i]}<->{names[i + 1]}", swapped))
    return out


VARIANTS = variants()
REFUSED = {
    "swap TaskState<->FragmentEditor",
    "swap ToolResultOffload<->BudgetFit",
    "swap Compaction<->PairValidation",
}


@pytest.mark.parametrize(("label", "stack"), VARIANTS, ids=[label for label, _ in VARIANTS])
def test_each_variant_recovers_or_is_refused_when_built(
    label: str, stack: list[Middleware]
) -> None:
    model = ScriptedModel(script(), model="gpt-4o", window=128_000)
    with tempfile.TemporaryDirectory() as folder:
        try:
            agent = HarnessAgent(
                model=model,
                system_prompt="You fix bugs.",
                tools=[grep],
                stack=stack,
                policy=ContextPolicy(max_input_tokens=LIMIT),
                workspace=folder,
                max_rounds=ROUNDS + 5,
            )
        except ConfigurationError as refusal:
            assert label in REFUSED, f"{label} was refused: {refusal}"
            assert "stands before" in str(refusal) and "move" in str(refusal)
            return
        assert label not in REFUSED, f"{label} should have been refused when built"
        error: Exception | None = None
        reply: Message | None = None
        try:
            reply = anyio.run(agent.call, "find every needle", RuntimeContext(session_id="s"))
        except (ContextOverflowError, ContextBudgetExceeded) as exc:
            error = exc
    for request in model.requests:
        assert estimate_request(request, EXACT) <= request.input_limit, label
        if request.ids.purpose == "agent":
            assert check_pairs(request.history).ok, label
    if label == "without OverflowRetry":
        assert isinstance(error, ContextOverflowError)
        return
    if label == "without Compaction" and error is not None:
        assert isinstance(error, ContextBudgetExceeded) and "Compaction" in str(error)
        return
    assert error is None, f"{label}: {error!r}"
    assert reply is not None and reply.text == "finished"
    assert model.overflows == 0 and sum(isinstance(r, Exception) for r in script()) == 1
    assert any("overflow_retry:1" in r.transforms for r in model.agent_requests), label
    done = {t.split(":")[0] for r in model.agent_requests for t in r.transforms}
    assert {"tool_output_trim", "history_compaction"} <= done, label  # the replay needs both


def todo_stack() -> list[Middleware]:
    return default_stack(task=enable_task_list())


async def test_compose_renders_what_the_agent_renders() -> None:
    """The superseded-block rule lives in compose(): the todo list is shown once either way."""
    todos = {"todos": [{"content": "find the bug", "status": "in_progress"}]}
    model = ScriptedModel(
        [ScriptedModel.tool_call("todo_write", todos, id="t1"), "ok"], model="gpt-4o"
    )
    agent = HarnessAgent(model=model, stack=todo_stack(), max_rounds=3)
    await agent.call("go", RuntimeContext(session_id="s"))
    through_agent = model.agent_requests[-1]
    assert any(m.role == "tool" and "find the bug" in m.text for m in through_agent.history)

    seen: list[ModelRequest] = []

    async def terminal(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    state: AgentState = agent.state(RuntimeContext(session_id="s"))
    handler = compose(todo_stack(), terminal)
    await handler(
        ModelRequest(
            model="gpt-4o",
            ids=RequestIds(session_id="s"),
            history=through_agent.history,
            tools=through_agent.tools,
            policy=ContextPolicy().resolve("gpt-4o"),
            input_limit=through_agent.input_limit,
            state=state,
            state_version=state.version,
        )
    )
    (composed,) = seen
    assert _rendered(composed) == _rendered(through_agent)
    shown = sum("find the bug" in m.text for m in composed.render())
    assert shown == 1, "the todo list must be shown once (its receipt is in the history)"


def _rendered(request: ModelRequest) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in request.render()]


def test_task_state_is_ordered_as_adding_context() -> None:
    assert isinstance(TaskState(), Middleware)
    with pytest.raises(ConfigurationError, match="BudgetFit stands before TaskState"):
        stack: Sequence[Middleware] = [*default_stack()[:4], *default_stack()[6:8], TaskState()]
        compose(stack, _never)


@pytest.mark.parametrize("adder", [TaskState, ContextSources, WorkspaceMaterials])
def test_the_fragment_editor_before_a_context_adder_is_refused_when_built(
    adder: type[Middleware],
) -> None:
    """FragmentEditor edits what the adders produced (TaskState's ``mode/plan`` part): after them."""
    editor_first: list[Middleware] = [FragmentEditor(), adder(), BudgetFit()]
    with pytest.raises(ConfigurationError) as refused:
        compose(editor_first, _never)
    message = str(refused.value)
    assert f"FragmentEditor stands before {adder.__name__}" in message
    assert "ADDS_CONTEXT" in message and f"move FragmentEditor after {adder.__name__}" in message
    compose([adder(), FragmentEditor(), BudgetFit()], _never)  # the declared order is accepted
    compose(default_stack(), _never)  # the default stack puts it after all three


async def _never(request: ModelRequest) -> ModelResponse:
    raise AssertionError("not called")
