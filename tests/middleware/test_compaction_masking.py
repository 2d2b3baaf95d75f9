"""Compaction's stage 0: observation masking and superseded reads, in rounds that compact only."""

from __future__ import annotations

import itertools
import json

import pytest

from harness import ContextPolicy, HarnessAgent, Message, RuntimeContext, ToolCall
from harness.errors import ConfigurationError
from harness.markers import MASKED, OFFLOADED, SUPERSEDED
from middleware.compaction import Compaction
from middleware.compaction._masking import mask_observations, supersede_reads
from middleware.compaction._settings import CompactionSettings
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")


def shell(command: str) -> str:
    """Run a shell command.

    Args:
        command: the command line.
    """
    return f"$ {command}\n" + "".join(f"{command} line {i}: some output text\n" for i in range(60))


def open_file(path: str) -> str:
    """Show a file.

    Args:
        path: the file.
    """
    return f"[File: {path}]\n" + "".join(f"{i}: code of {path} line {i}\n" for i in range(40))


def write_file(path: str, content: str) -> str:
    """Write a file.

    Args:
        path: where to write.
        content: the new content.
    """
    return f"wrote {len(content)} characters to {path}"


def agent(model: ScriptedModel, compaction: Compaction, limit: int) -> HarnessAgent:
    return HarnessAgent(
        model=model,
        system_prompt="You are a careful engineer.",
        tools=[shell, open_file, write_file],
        stack=[compaction],
        policy=ContextPolicy(max_input_tokens=limit),
    )


LIMIT = 1_800


def call(name: str, **arguments: str) -> Message:
    return ScriptedModel.tool_call(name, arguments)


async def test_old_outputs_are_masked_in_one_batch_and_the_newest_kept() -> None:
    model = ScriptedModel([*(call("shell", command=f"cmd{i}") for i in range(8)), "done"])
    compaction = Compaction(
        trigger_messages=1000, trim_min_tokens=None, mask_observations=2, memory=None
    )
    a = agent(model, compaction, 3_500)
    await a.call("run the commands", CTX)

    rounds = model.agent_requests
    masking = [
        i for i, r in enumerate(rounds) if any("observation_mask:" in t for t in r.transforms)
    ]
    assert masking, "the history outgrew its budget: a round must have masked"
    first = rounds[masking[0]]
    tools = [m for m in first.history if m.role == "tool"]
    assert [bool(m.meta(MASKED)) for m in tools] == [True] * (len(tools) - 2) + [False] * 2
    for m in tools[:-2]:
        assert m.text.startswith("[old shell output masked: 61 lines")
        assert str(m.meta("origin_id")) in m.text  # where to read it back
    masked_ids = [t.target for t in first.transforms if t.startswith("observation_mask:")]
    assert masked_ids == [str(m.meta("origin_id")) for m in tools[:-2]]
    # Masking freed enough: no summary (the hybrid summarises only when it does not).
    assert not any(r.ids.purpose == "summary" for r in model.requests)
    # Between the rounds that mask, each request repeats the previous one's history.
    for before, after in itertools.pairwise(rounds):
        if rounds.index(after) in masking:
            continue
        shared = after.history[: len(before.history)]
        assert [m.id for m in shared] == [m.id for m in before.history]
    # The full record keeps every output in full.
    assert [m.text for m in await a.history(CTX) if m.role == "tool"] == [
        shell(f"cmd{i}") for i in range(8)
    ]


async def test_masking_is_off_by_default() -> None:
    model = ScriptedModel([*(call("shell", command=f"cmd{i}") for i in range(8)), "done"])
    a = agent(model, Compaction(trigger_messages=1000, trim_min_tokens=None, memory=None), 3_500)
    await a.call("run the commands", CTX)
    assert not any(m.meta(MASKED) for r in model.agent_requests for m in r.history)


def test_an_offloaded_output_is_masked_to_a_read_file_pointer() -> None:
    settings = CompactionSettings(mask_observations=1, memory=None)
    offloaded = Message.tool(
        "c1", "preview " * 50, name="shell", metadata={OFFLOADED: "large_tool_results/c1.txt"}
    )
    history = (
        Message.user("go"),
        Message.assistant(tool_calls=[ToolCall(id="c1", name="shell", arguments="{}")]),
        offloaded,
        Message.assistant(tool_calls=[ToolCall(id="c2", name="shell", arguments="{}")]),
        Message.tool("c2", "newest " * 50, name="shell"),
        Message.assistant("ok"),
    )
    out, masked = mask_observations(settings, history)
    assert masked == [offloaded.id]
    assert 'read_file(path="large_tool_results/c1.txt")' in out[2].text
    assert out[4] is history[4]
    assert mask_observations(settings, out) == (out, [])  # never masked twice


async def test_a_read_superseded_by_a_later_read_or_write_becomes_a_pointer() -> None:
    script: list[Message | str] = [
        call("open_file", path="a.py"),
        call("open_file", path="b.py"),
        ScriptedModel.tool_call("write_file", {"path": "a.py", "content": "x = 1"}),
        call("open_file", path="b.py"),
        *(
            ScriptedModel.tool_call("write_file", {"path": f"n{i}", "content": "."})
            for i in range(9)
        ),
        "done",
    ]
    model = ScriptedModel(script)
    compaction = Compaction(
        trigger_messages=1000, trim_min_tokens=None, supersede_reads=True, memory=None
    )
    a = agent(model, compaction, LIMIT)
    await a.call("edit a.py", CTX)

    done = next(
        r for r in model.agent_requests if any("superseded_read:" in t for t in r.transforms)
    )
    reads = {m.tool_call_id: m for m in done.history if m.role == "tool" and m.name == "open_file"}
    calls = [c for m in done.history for c in m.tool_calls]
    a_read, b_read, write, b_again = calls[0], calls[1], calls[2], calls[3]
    assert reads[a_read.id].meta(SUPERSEDED) == write.id
    assert "changed by a later write" in reads[a_read.id].text
    assert reads[b_read.id].meta(SUPERSEDED) == b_again.id
    assert "read again later" in reads[b_read.id].text
    assert reads[b_again.id].text == open_file("b.py")  # the latest read stays
    targets = {t.target for t in done.transforms if t.startswith("superseded_read:")}
    assert len(targets) == 2


def test_superseded_reads_leave_other_calls_alone() -> None:
    def group(call_id: str, name: str, arguments: dict[str, str], text: str) -> list[Message]:
        return [
            Message.assistant(
                tool_calls=[ToolCall(id=call_id, name=name, arguments=json.dumps(arguments))]
            ),
            Message.tool(call_id, text, name=name),
        ]

    long = "line\n" * 100
    history = (
        Message.user("go"),
        *group("c1", "open", {"path": "a.py", "line": "1"}, long),
        *group("c2", "open", {"path": "a.py", "line": "200"}, long),  # another range: kept
        *group("c3", "bash", {"command": "cat b.py | head"}, long),  # a pipeline: kept
        *group("c4", "bash", {"command": "cat b.py"}, long),
        *group("c5", "bash", {"command": "cat b.py"}, long),
    )
    out, done = supersede_reads(history)
    assert [m.meta(SUPERSEDED) for m in out if m.role == "tool"] == [None, None, None, "c5", None]
    assert len(done) == 1


@pytest.mark.parametrize("value", [0, -1, True, "5"])
def test_mask_observations_must_be_a_positive_int(value: object) -> None:
    with pytest.raises(ConfigurationError, match="mask_observations"):
        Compaction(mask_observations=value)  # type: ignore[arg-type]


async def test_a_summary_that_does_not_name_the_files_gets_them_attached() -> None:
    script: list[Message | str] = [
        call("open_file", path="src/app/models.py"),
        ScriptedModel.tool_call("write_file", {"path": "src/app/views.py", "content": "x = 1"}),
        *(call("shell", command=f"cmd{i}") for i in range(8)),
        "done",
    ]
    model = ScriptedModel(script, summary="The agent ran some commands.")
    compaction = Compaction(
        trigger_messages=8,
        keep_tokens=0,
        keep_messages=4,
        trim_min_tokens=None,
        memory=None,
        summary_keeps_files=True,
    )
    a = agent(model, compaction, 20_000)
    await a.call("fix the views", CTX)

    done = next(
        r for r in model.agent_requests if any("summary_files_attached:" in t for t in r.transforms)
    )
    summary = next(m for m in done.history if m.meta("summary"))
    assert "## Files touched" in summary.text
    listed = summary.text.split("## Files touched", 1)[1]
    assert "src/app/views.py" in listed and "src/app/models.py" in listed
    assert listed.index("src/app/views.py") < listed.index("src/app/models.py")  # newest first
    # The next summary carries the list on, though its text names none of them again.
    later = [m for r in model.agent_requests for m in r.history if m.meta("summary")]
    assert all("src/app/views.py" in m.text for m in later)


async def test_files_are_not_attached_by_default() -> None:
    model = ScriptedModel(
        [
            call("open_file", path="src/a.py"),
            *(call("shell", command=f"c{i}") for i in range(8)),
            "done",
        ],
        summary="The agent ran some commands.",
    )
    compaction = Compaction(
        trigger_messages=8, keep_tokens=0, keep_messages=4, trim_min_tokens=None, memory=None
    )
    await agent(model, compaction, 20_000).call("go", CTX)
    assert not any("## Files touched" in m.text for r in model.agent_requests for m in r.history)
