"""A request the stack refuses is logged, never committed as history: the next one works.

Through `HarnessAgent.call` and `stream_events`, on real SQLite files; "a new process" is a
new agent and a new store object on the same file. The drop-in call and the proxy hook are in
``tests/integration/test_refused_requests.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import ContextBudgetExceeded, ContextPolicy, HarnessAgent, RuntimeContext
from harness.sessions import MessageEvent, RefusalEvent, SessionStore, open_store
from middleware import BudgetFit, PairValidation
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u1", session_id="s1")
LIMIT = 2_000
OVERSIZED = "word " * 5_000  # ~5,000 tokens: the newest user turn can never fit 2,000


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return f"ran {command}"


def agent_on(url: str, model: ScriptedModel) -> HarnessAgent:
    return HarnessAgent(
        model=model, tools=[shell], store=url, policy=ContextPolicy(max_input_tokens=LIMIT)
    )


async def record_of(url: str) -> tuple[list[str], list[RefusalEvent]]:
    """Return the texts of the session's history and its refusals, read by a new store."""
    store: SessionStore = open_store(url)
    try:
        key = agent_on(url, ScriptedModel([])).key(CTX)
        events = [e.event for e in await store.events(key, limit=1_000)]
        loaded = await store.load(key)
    finally:
        await store.aclose()
    texts = [e.message.text for e in events if isinstance(e, MessageEvent)]
    assert loaded is not None
    working = [m.text for m in loaded[1].values()]
    assert OVERSIZED not in working
    return texts, [e for e in events if isinstance(e, RefusalEvent)]


async def test_an_oversized_first_turn_is_logged_as_refused_and_the_next_call_works(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    model = ScriptedModel(["hello back"])
    agent = agent_on(url, model)
    with pytest.raises(ContextBudgetExceeded):
        await agent.call(OVERSIZED, CTX)
    assert model.agent_requests == []  # nothing was sent
    assert agent.state(CTX).working_history == []  # RAM is back to the stored state

    reply = await agent.call("hello", CTX)  # the same agent, the same session
    assert reply.text == "hello back"
    (request,) = model.agent_requests
    assert [m.text for m in request.history] == ["hello"]

    texts, refusals = await record_of(url)
    assert texts == ["hello", "hello back"]
    (refusal,) = refusals
    assert refusal.error == "ContextBudgetExceeded"
    assert [m.text for m in refusal.messages] == [OVERSIZED]
    assert refusal.turn_id == refusal.messages[0].id


async def test_a_new_process_on_a_session_with_a_refused_turn_works(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    first = agent_on(url, ScriptedModel(["first answer"]))
    await first.call("a question", CTX)
    with pytest.raises(ContextBudgetExceeded):
        await first.call(OVERSIZED, CTX)

    model = ScriptedModel(["resumed"])
    second = agent_on(url, model)  # as a new process: a new agent and store object
    assert (await second.call("and now?", CTX)).text == "resumed"
    (request,) = model.agent_requests
    assert [m.text for m in request.history] == ["a question", "first answer", "and now?"]
    texts, refusals = await record_of(url)
    assert texts == ["a question", "first answer", "and now?", "resumed"]
    assert [r.error for r in refusals] == ["ContextBudgetExceeded"]


async def test_stream_events_refuses_alike(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/sessions.db"
    model = ScriptedModel(["streamed back"])
    agent = agent_on(url, model)
    with pytest.raises(ContextBudgetExceeded):
        async for _ in agent.stream_events(OVERSIZED, CTX):
            pass
    kinds = [e.kind async for e in agent_on(url, model).stream_events("hello", CTX)]
    assert kinds[-1] == "final"
    texts, refusals = await record_of(url)
    assert texts == ["hello", "streamed back"]
    assert len(refusals) == 1 and refusals[0].messages[0].text == OVERSIZED


async def test_a_refused_later_round_drops_the_tool_results_it_carried(tmp_path: Path) -> None:
    # The tool's result is too big for the budget (no offload in this stack): the round after
    # it is refused, so the result is logged in the refusal, and the next call answers the
    # call as interrupted instead of sending the oversized result forever.
    def dump() -> str:
        """Dump everything."""
        return OVERSIZED

    url = f"sqlite:///{tmp_path}/sessions.db"
    model = ScriptedModel([ScriptedModel.tool_call("dump", {}), "recovered"])
    agent = HarnessAgent(
        model=model,
        tools=[dump],
        store=url,
        stack=[BudgetFit(), PairValidation()],
        policy=ContextPolicy(max_input_tokens=LIMIT),
    )
    with pytest.raises(ContextBudgetExceeded):
        await agent.call("dump it", CTX)
    assert (await agent_on(url, model).call("go on", CTX)).text == "recovered"
    last = model.agent_requests[-1]
    assert [(m.role, m.text) for m in last.history][-3:] == [
        ("assistant", ""),
        ("tool", "no result: interrupted"),
        ("user", "go on"),
    ]
    _, refusals = await record_of(url)
    (refusal,) = refusals
    assert [m.role for m in refusal.messages] == ["tool"]
    assert refusal.turn_id is None  # a tool result the agent made is not a caller's turn
