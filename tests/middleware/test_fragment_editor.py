"""FragmentEditor through HarnessAgent and ScriptedModel: the article's validation matrix.

Every check is on the request the model actually received (``model.agent_requests``), with a
real SQLite store, the CLI-facing `harness.fragments.Fragments` writing the fragments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import ContextPolicy, Fragments, HarnessAgent, Message, RuntimeContext
from harness.errors import ConfigurationError
from harness.events import AgentEvent
from harness.fragments.model import Fragment, ref_id
from harness.markers import FRAGMENT, ORIGIN_ID
from harness.messages import ToolCall
from harness.request import ModelRequest, RunScope
from harness.sessions import SessionKey, SessionStore, open_store
from harness.state import SessionScratch
from harness.types import Middleware
from middleware import BudgetFit, Compaction, FragmentEditor, PairValidation, ToolResultOffload
from middleware._history import check_pairs, units
from middleware.fragment_editor import _touched_units
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u1", session_id="s1")
KEY = SessionKey("u1", "agent", "s1")


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return f"ran {command}: SECRET-OUTPUT-42"


def make_agent(store: SessionStore, model: ScriptedModel, **policy: int) -> HarnessAgent:
    stack: list[Middleware] = [
        FragmentEditor(),
        ToolResultOffload(),
        BudgetFit(),
        Compaction(),
        PairValidation(),
    ]
    return HarnessAgent(
        model=model,
        tools=[shell],
        stack=stack,
        store=store,
        system_prompt="You are careful.",
        policy=ContextPolicy(**policy),  # type: ignore[arg-type]
    )


def sent_text(model: ScriptedModel, index: int = -1) -> str:
    request = model.agent_requests[index]
    return "\n".join(m.text for m in request.render())


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SessionStore]:
    opened = open_store(f"sqlite://{tmp_path / 'sessions.db'}")
    yield opened
    await opened.aclose()


async def test_add_edit_revert_and_remove_change_what_the_model_receives(
    store: SessionStore,
) -> None:
    model = ScriptedModel(default="ok")
    agent = make_agent(store, model)
    fragments = Fragments(store, KEY)
    await agent.call("Compute the invoice total in floats", CTX)
    first_user = agent.state(CTX).working_history[0]

    added = await fragments.add("Never use floating point for money.", title="money rule")
    await fragments.edit(first_user.id, content="Compute the invoice total in decimals")
    await agent.call("go on", CTX)
    text = sent_text(model)
    assert "Never use floating point for money." in text
    assert "in decimals" in text and "in floats" not in text
    request = model.agent_requests[-1]
    assert any(b.source_id == f"fragment:{added.id}@1" for b in request.blocks)
    assert model.agent_requests[-1].history[0].meta("fragment") == f"fragment:{first_user.id}@1"

    await fragments.revert(first_user.id)  # back to the recorded message
    await fragments.remove(added.id)
    await agent.call("and now?", CTX)
    text = sent_text(model)
    assert "in floats" in text and "in decimals" not in text
    assert "floating point for money" not in text


async def test_disabling_a_tool_result_hides_its_call_and_pairs_stay_valid(
    store: SessionStore,
) -> None:
    model = ScriptedModel(
        [
            ScriptedModel.tool_call("shell", {"command": "ls"}),
            "listed",
            "second",
            "third",
        ]
    )
    agent = make_agent(store, model)
    fragments = Fragments(store, KEY)
    await agent.call("list the files", CTX)
    result = next(m for m in agent.state(CTX).working_history if m.role == "tool")

    await fragments.disable(result.id)
    await agent.call("what next?", CTX)  # PairValidation(mode="fail") let it through
    request = model.agent_requests[-1]
    assert "SECRET-OUTPUT-42" not in sent_text(model)
    assert not any(m.tool_calls or m.role == "tool" for m in request.history)
    assert check_pairs(request.history).ok
    assert f"fragment_disabled:{result.id}" in request.transforms
    # Left out for the request only: the working history still has both.
    assert any(m.id == result.id for m in agent.state(CTX).working_history)

    await fragments.enable(result.id)
    await agent.call("and again?", CTX)
    assert "SECRET-OUTPUT-42" in sent_text(model)
    assert check_pairs(model.agent_requests[-1].history).ok


async def test_a_pinned_system_fragment_is_in_system_and_a_project_one_in_every_session(
    store: SessionStore,
) -> None:
    model = ScriptedModel(default="ok")
    agent = make_agent(store, model)
    pinned = await Fragments(store, KEY).add("Answer in English.", kind="system")
    await Fragments(store, KEY).add("Use the decimal module.", scope="project")
    await agent.call("hi", CTX)
    request = model.agent_requests[-1]
    assert f"fragment:{pinned.id}@1" in [p.name for p in request.system]
    assert "Answer in English." in request.system_text
    assert "Use the decimal module." in sent_text(model)

    other = RuntimeContext(user_id="u2", session_id="elsewhere")
    await agent.call("hello", other)
    text = sent_text(model)
    assert "Use the decimal module." in text  # the project's rule reaches every session
    assert "Answer in English." not in text  # u1's session fragment does not


async def test_reasoning_content_stays_on_every_remaining_assistant_turn(
    store: SessionStore,
) -> None:
    call = ScriptedModel.tool_call("shell", {"command": "ls"}).replace(reasoning_content="r1")
    model = ScriptedModel(
        [
            call,
            Message.assistant("listed", reasoning_content="r2"),
            Message.assistant("fine", reasoning_content="r3"),
        ],
        default=Message.assistant("ok", reasoning_content="rx"),
    )
    agent = make_agent(store, model)
    fragments = Fragments(store, KEY)
    await agent.call("list", CTX)
    await agent.call("more", CTX)
    history = agent.state(CTX).working_history
    listed = next(m for m in history if m.text == "listed")
    result = next(m for m in history if m.role == "tool")
    note = await fragments.add("a note")
    await fragments.edit(listed.id, content="listed (edited)")
    await fragments.disable(result.id)
    await fragments.move(note.id, position=0)
    await agent.call("go", CTX)
    sent = model.agent_requests[-1].history
    assistants = [m for m in sent if m.role == "assistant"]
    assert [m.reasoning_content for m in assistants] == ["r2", "r3"]
    assert assistants[0].text == "listed (edited)"


async def test_a_fragment_over_budget_is_omitted_with_a_warning(store: SessionStore) -> None:
    model = ScriptedModel(default="ok", window=None)
    agent = make_agent(store, model, max_input_tokens=6_000)
    fragments = Fragments(store, KEY)
    big = await fragments.add("word " * 9_000, title="huge")
    events: list[AgentEvent] = [e async for e in agent.stream_events("hi", CTX)]
    request = model.agent_requests[-1]
    assert f"omitted_for_budget:fragment:{big.id}@1" in request.transforms
    assert "word word" not in sent_text(model)
    (warned,) = [e for e in events if e.code == "fragment_omitted_for_budget"]
    assert warned.kind == "warning" and (warned.text or "").startswith(
        f"fragment:{big.id}@1 was left out"
    )
    logged = await store.events(KEY, kinds=("warning",))
    assert logged


async def test_secrets_in_a_fragment_never_reach_the_store_in_clear(
    store: SessionStore, tmp_path: Path
) -> None:
    fragments = Fragments(store, KEY)
    await fragments.add("deploy with password=hunter2 and key sk-abcdefghijklmnop1234")
    await store.aclose()
    raw = b"".join(p.read_bytes() for p in sorted(_files(tmp_path)))
    assert b"hunter2" not in raw and b"sk-abcdefghijklmnop1234" not in raw
    assert b"[REDACTED:password]" in raw


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError):
        FragmentEditor(project="")
    with pytest.raises(ConfigurationError):
        FragmentEditor(warn_at=2.0)


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith("sessions.db")]


@st.composite
def marked_histories(draw: st.DrawFn) -> tuple[tuple[Message, ...], set[int]]:
    """A history of users, assistants with and without calls, and (stray) results; some marked."""
    messages: list[Message] = []
    for i, role in enumerate(draw(st.lists(st.sampled_from("uact"), max_size=14))):
        mid = f"m{i}"
        if role == "u":
            messages.append(Message.user("q", id=mid))
        elif role == "a":
            messages.append(Message.assistant("a", id=mid))
        elif role == "c":
            messages.append(Message.assistant(tool_calls=[ToolCall(id=f"c{i}", name="t")], id=mid))
        else:
            messages.append(Message.tool(f"c{i}", "r", id=mid))
    marked = draw(st.sets(st.integers(min_value=0, max_value=max(0, len(messages) - 1))))
    return tuple(messages), {i for i in marked if i < len(messages)}


@given(marked_histories())
@settings(max_examples=200, deadline=None)
def test_only_the_units_holding_an_overlay_or_a_marker_are_visited(
    drawn: tuple[tuple[Message, ...], set[int]],
) -> None:
    """The units FragmentEditor works on are exactly the history's units with something to do."""
    history, marked = drawn
    overlays = {
        history[i].id: Fragment(id=history[i].id, kind="user", message=True, disabled=True)
        for i in marked
        if i % 2 == 0
    }
    changed = tuple(  # odd ones carry the marker of an edited copy (its id answers to origin)
        m.replace(id=f"{m.id}~copy", metadata={FRAGMENT: "fragment:x@1", ORIGIN_ID: m.id})
        if i in marked and i % 2
        else m
        for i, m in enumerate(history)
    )
    expected = [(s, e) for s, e in units(changed) if any(i in marked for i in range(s, e))]
    assert _touched_units(changed, overlays) == expected


@pytest.mark.parametrize("stray", [False, True])
def test_putting_left_out_messages_back_takes_the_short_way_to_the_same_history(
    stray: bool,
) -> None:
    """When the later layers keep what was sent, restore gives what the full placing gives."""
    call = Message.assistant(tool_calls=[ToolCall(id="c1", name="t"), ToolCall(id="c2", name="t")])
    history = (
        Message.user("q"),
        call,
        Message.tool("c1", "one"),
        Message.tool("c2", "two"),
        *([Message.tool("c9", "a result without its call")] if stray else []),
        Message.user("next"),
    )
    disabled = [history[2].id, *([history[4].id] if stray else [])]
    overlays = [Fragment(id=i, kind="tool", message=True, disabled=True) for i in disabled]
    request = ModelRequest(model="m", history=history)
    prepared, left_out = FragmentEditor()._apply(request, overlays, [])
    assert left_out is not None and left_out.passed == prepared.history
    assert left_out.sent is None  # the ids are worked out only by the full placing
    placed = msgspec.structs.replace(left_out, left=()).restore(prepared.history)  # the full way
    assert left_out.restore(prepared.history) == placed
    assert placed == (history if not stray else history[:4] + history[5:])


@given(
    marked_histories(),
    st.integers(min_value=0, max_value=14),
    st.integers(0, 3),
    st.integers(min_value=0, max_value=16),
)
@settings(max_examples=150, deadline=None)
def test_a_rounds_work_kept_for_the_shared_prefix_gives_what_working_anew_gives(
    drawn: tuple[tuple[Message, ...], set[int]], cut: int, extra: int, rewrite: int
) -> None:
    """Each round reuses the last one's units and parts for the shared prefix: same request.

    Round two grows round one's history; round three rewrites one message of it (as
    compaction or offload would) and grows it again.
    """
    history, marked = drawn
    overlays = [
        Fragment(id=history[i].id, kind="user", message=True, disabled=i % 3 == 0, edited=True)
        for i in marked
    ]
    first = history[: min(cut, len(history))]
    grown = (
        first
        + history[len(first) :]
        + tuple(Message.tool(f"c{len(first)}", "r") for _ in range(extra))
    )
    at = min(rewrite, len(grown))
    rewritten = (*grown[:at], Message.user("rewritten"), *grown[at + 1 :], Message.user("more"))
    editor = FragmentEditor()
    run = RunScope(session=SessionScratch())
    for rounds_history in (first, grown, rewritten, (*rewritten, Message.user("again"))):
        again, again_left = editor._apply(
            ModelRequest(model="m", history=rounds_history, run=run), overlays, []
        )
        anew, anew_left = FragmentEditor()._apply(
            ModelRequest(model="m", history=rounds_history), overlays, []
        )
        assert (again.history, again.transforms, again_left) == (
            anew.history,
            anew.transforms,
            anew_left,
        )


@given(marked_histories(), st.integers(min_value=0, max_value=14), st.integers(0, 16))
@settings(max_examples=150, deadline=None)
def test_the_scan_for_reverted_copies_kept_for_the_shared_prefix_finds_what_a_full_scan_finds(
    drawn: tuple[tuple[Message, ...], set[int]], cut: int, rewrite: int
) -> None:
    """Copies whose overlay no longer edits are found past the shared prefix only: the same."""
    history, marked = drawn
    copies = tuple(  # marked ones are edited copies; every third one's edit was reverted
        m.replace(id=f"{m.id}~copy", metadata={FRAGMENT: "fragment:x@1", ORIGIN_ID: m.id})
        if i in marked
        else m
        for i, m in enumerate(history)
    )
    reverted = frozenset(history[i].id for i in marked if i % 3 == 0)
    first = copies[: min(cut, len(copies))]
    at = min(rewrite, len(copies))
    rewritten = (*copies[:at], copies[at - 1] if at else Message.user("x"), *copies[at + 1 :])
    editor = FragmentEditor()
    run = RunScope(session=SessionScratch())
    for scanned in (
        first,
        copies,
        rewritten,
        (*rewritten, copies[0] if copies else Message.user("y")),
    ):
        found = editor._marked(ModelRequest(model="m", history=scanned, run=run), reverted)
        fresh = FragmentEditor()._marked(ModelRequest(model="m", history=scanned), reverted)
        assert (
            found
            == fresh
            == {ref_id(m) for m in scanned if m.meta(FRAGMENT) and ref_id(m) in reverted}
        )


def test_the_sets_parts_are_kept_while_the_same_fragments_come_and_follow_any_change() -> None:
    """Same fragment objects, folder and priority: the kept parts; anything else: made anew."""
    pinned = Fragment(id="p", kind="system", content="pinned rule", scope="project")
    note = Fragment(id="n", kind="user", content="a note")
    edit = Fragment(id="m1", kind="user", message=True, edited=True, content="edited")
    builtin = Fragment(id="b", kind="system", content="today is {date}", builtin=1)
    history = (Message.user("q", id="m1"), Message.assistant("a", id="m2"))
    editor = FragmentEditor()
    run = RunScope(session=SessionScratch())

    def sent(session: list[Fragment], project: list[Fragment], cwd: str = "/w") -> object:
        request = ModelRequest(model="m", history=history, run=run)
        kept = editor.apply(request, session, project, cwd=cwd)
        anew = FragmentEditor(priority=editor.priority).apply(
            ModelRequest(model="m", history=history), session, project, cwd=cwd
        )
        assert (kept.system, kept.blocks, kept.history) == (anew.system, anew.blocks, anew.history)
        return kept.system, kept.blocks, [m.text for m in kept.history]

    first = sent([note, edit], [pinned])
    assert sent([note, edit], [pinned]) == first  # new lists, the same objects
    changed = sent([note.replace(content="a new note", version=2), edit], [pinned])
    assert changed != first
    assert sent([note], [pinned]) != changed  # the overlay is gone: the original message
    editor.priority = 7  # the note's block now has this priority (checked against anew)
    sent([note], [pinned])
    sent([note], [pinned], cwd="/other")
    assert "{date}" not in str(sent([note], [pinned, builtin]))  # made anew: today's date
