"""A long history's compaction summarises each message once; the next one only what is new.

Through the real agent loop and the default stack on the ScriptedModel, which records every
summary request it receives. Each history message carries a unique marker (``A00012`` for an
assistant turn, ``R00012`` for a tool result), so a test can count in how many summary
requests a message's text appeared.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from harness import (
    ContextOverflowError,
    HarnessAgent,
    Message,
    ModelRequest,
    RuntimeContext,
    ToolCall,
)
from harness.accounting import estimate_request
from harness.tokens import estimator_for
from middleware import default_stack
from middleware.compaction import MERGE_PROMPT, Compaction
from middleware.workspace_materials import WorkspaceMaterials
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")
MARKER = re.compile(r"\b[AR]\d{5}\b")


def units(count: int, *, start: int = 0) -> list[Message]:
    """Return ``count`` tool-call units (assistant call + result), each message marked."""
    messages: list[Message] = []
    for i in range(start, start + count):
        call = ToolCall(id=f"call-{i}", name="shell", arguments=json.dumps({"command": "make"}))
        messages.append(Message.assistant(f"A{i:05d}: building again.", tool_calls=[call]))
        body = "".join(f"line {k}: compiler output for this step\n" for k in range(25))
        messages.append(Message.tool(f"call-{i}", f"R{i:05d}\n{body}", name="shell"))
    return messages


def numbered() -> Callable[[ModelRequest], str]:
    count = {"n": 0}

    def reply(request: ModelRequest) -> str:
        count["n"] += 1
        return f"SUMMARY-{count['n']}: the build is being fixed."

    return reply


def make_agent(tmp_path: Path, client: ScriptedModel, **compaction: object) -> HarnessAgent:
    # at 50 messages, as these long histories are compacted by a message count
    settings: dict[str, object] = {
        "memory": None,
        "trim_min_tokens": None,
        "trigger_messages": 50,
        **compaction,
    }
    stack = default_stack(
        compaction=Compaction(**settings),  # type: ignore[arg-type]
        materials=WorkspaceMaterials(agents_file=None, memory_folder=None),
    )
    return HarnessAgent(model=client, stack=stack, workspace=str(tmp_path))


def summary_prompts(model: ScriptedModel) -> list[str]:
    """The text of each summary request: its prompt, or an in-place request's conversation."""
    return [
        "\n\n".join(m.text for m in r.history) for r in model.requests if r.ids.purpose == "summary"
    ]


def markers_per_request(prompts: list[str]) -> Counter[str]:
    """How many summary requests each marker appeared in."""
    seen: Counter[str] = Counter()
    for prompt in prompts:
        seen.update(set(MARKER.findall(prompt)))
    return seen


async def test_a_long_history_is_summarised_once_per_message(tmp_path: Path) -> None:
    model = ScriptedModel(default="Done.", summary=numbered())
    agent = make_agent(tmp_path, model, summary_chunk_tokens=1_500)
    agent.state(CTX).append(Message.user("Fix the build."), *units(150))
    await agent.call("Continue.", CTX)

    prompts = summary_prompts(model)
    partials = [p for p in prompts if not p.startswith(MERGE_PROMPT[:40])]
    merges = [p for p in prompts if p.startswith(MERGE_PROMPT[:40])]
    assert len(partials) >= 10 and merges  # chunked, then merged
    seen = markers_per_request(prompts)
    assert seen and max(seen.values()) == 1  # no message's text in two summary requests
    assert not any(MARKER.search(p) for p in merges)  # merges get summaries, never messages
    kept = {
        marker
        for request in model.agent_requests
        for message in request.history
        for marker in MARKER.findall(message.text)
    }
    summarised = set(seen)
    # Every marked message was either summarised once or kept word for word — none lost.
    every = {f"{kind}{i:05d}" for i in range(150) for kind in "AR"}
    assert summarised | kept == every and not summarised & kept
    estimator = estimator_for("scripted")
    early_tokens = sum(estimator.count(p) for p in partials)
    history_tokens = estimator.count_messages(units(150))
    # The partial requests hold the early messages once (plus one prompt each), not more.
    assert early_tokens < history_tokens + len(partials) * estimator.count(
        Compaction().settings.summary_prompt
    )


async def test_a_later_compaction_sends_only_the_new_messages_and_the_summary(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(default="Done.", summary=numbered())
    agent = make_agent(tmp_path, model, keep_tokens=0, keep_messages=6, trigger_messages=20)
    agent.state(CTX).append(Message.user("Fix the build."), *units(20))
    await agent.call("Continue.", CTX)
    first = summary_prompts(model)
    assert len(first) == 1
    first_markers = set(MARKER.findall(first[0]))

    agent.state(CTX).append(*units(15, start=20))
    await agent.call("Go on.", CTX)
    second = summary_prompts(model)[1:]
    assert len(second) == 1
    (prompt,) = second
    assert "SUMMARY-1: the build is being fixed." in prompt  # the previous summary, updated
    again = set(MARKER.findall(prompt)) & first_markers
    assert not again, f"re-summarised: {sorted(again)[:5]}"
    assert {f"A{i:05d}" for i in range(20, 26)} <= set(MARKER.findall(prompt))  # what is new
    history = model.agent_requests[-1].history  # "Continue." folded the task into it
    assert history[0].text.endswith("SUMMARY-2: the build is being fixed.")


async def test_a_rejected_chunk_is_split_and_only_it_is_asked_again(tmp_path: Path) -> None:
    # The summariser rejects, as too long, any request over 700 tokens that holds R00040
    # (its real window is smaller than it says for that text); every other chunk is fine.
    estimator = estimator_for("scripted")
    answered: list[str] = []

    def reply(request: ModelRequest) -> str | ContextOverflowError:
        prompt = request.history[0].text
        if "R00040" in prompt and estimate_request(request, estimator) > 700:
            return ContextOverflowError("maximum context length exceeded")
        answered.append(prompt)
        return f"SUMMARY-{len(answered)}: the build is being fixed."

    model = ScriptedModel(default="Done.", summary=reply)
    agent = make_agent(tmp_path, model, summary_chunk_tokens=2_400)
    agent.state(CTX).append(Message.user("Fix the build."), *units(60))
    await agent.call("Continue.", CTX)

    rejected = len(summary_prompts(model)) - len(answered)
    assert rejected >= 2  # the chunk with R00040 and then one of its halves
    seen = markers_per_request(answered)
    assert seen["R00040"] == 1 and seen["A00001"] == 1
    assert max(seen.values()) == 1  # what was answered is never asked again
    assert len(seen) >= 60  # and the early part really was summarised
    # "Continue." is a newer user turn: the task went into the summary, which leads.
    assert model.agent_requests[-1].history[0].text.endswith("the build is being fixed.")


PIECES = [
    "remember",
    "Always",
    "NEVER",
    "prefer",
    "from now on",
    "make sure",
    "note that",
    "Note:",
    " note :",
    "Decision:",
    "lesson:",
    "alwayſ",
    "ma\u212ae sure",
    "ß",
    "İ",
    "x",
    " ",
    "\n",
    "\r\n",
    "\r",
    "\x0b",
    "\x1c",
    "\x85",
    "\u2028",
]


@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
@settings(max_examples=150, deadline=None)
def test_memory_cue_lines_are_those_a_regex_finds_on_every_line(text: str) -> None:
    # The fast path (substring search on the folded text, then the regex on those lines only)
    # finds exactly what testing every line with the regex finds.
    from middleware import memory

    for cue, words, at_start in (
        (memory._USER_CUES, memory._CUE_WORDS, False),
        (memory._ASSISTANT_PREFIXES, memory._PREFIX_WORDS, True),
    ):
        test = cue.match if at_start else cue.search
        expected = [line for line in text.splitlines() if test(line)]
        assert memory._cued_lines(text, cue, words, match=at_start) == expected
