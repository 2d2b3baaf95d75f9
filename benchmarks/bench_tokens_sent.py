"""Tokens sent: over one replayed session, what each system sends and how often it overflows.

The session is fed round by round into each system with the same window (32,768 tokens;
16,384 with ``--quick``, 12,288 in smoke mode) and the same input limit (window − 4,096
output reserve − 1,024 margin). A model request happens before every assistant message of
the recording (and at its end when a request is due there); each system's request is
counted with the **exact** tokenizer
(``harness.tokens.estimator_for("gpt-4o", exact=True)``) — messages as sent, plus the same
tool schemas and reply priming for every system — and overflows when that count exceeds
the window.

- **ours**: a `HarnessAgent` with ``middleware.default_stack()``, replayed through
  `benchmarks.workloads.replay` on a ``ScriptedModel`` that counts exactly and rejects a
  request over the window (so ``OverflowRetry`` really handles it: forced compaction and
  one retry, both counted). Summaries come back as a fixed ~300-token text.
- **LangChain**: ``SummarizationMiddleware`` (trigger: 50 messages or the input limit,
  like our compaction; keep: 35 % of the input limit in tokens, like our default keep
  range; a summariser returning the same fixed text) then
  ``ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`` (defaults; our tool-output
  trimming is at its defaults too), driven hook by hook as a LangChain agent would, the
  summarised state persisting between rounds.
- **litellm**: ``trim_messages(max_tokens=input limit − tool schemas)`` on the full
  history every round (stateless). To bound the benchmark's own time it is given the
  shortest suffix of the history holding at least twice its limit, which leaves its output
  unchanged.

"Invalid tool pairs" counts requests in which a tool result lacks its call (or a call its
result): providers reject those.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks._report import Mode, Progress
from benchmarks.peers import LangChainPeer, from_langchain, our_stack, to_langchain, trim_messages
from benchmarks.workloads import (
    FIXED_SUMMARY,
    ReplayClient,
    Session,
    make_session,
    replay,
    replay_tools,
    request_points,
    request_ready,
    stack_tool_names,
)
from harness.accounting import REPLY_PRIMING, estimate_request
from harness.agent import HarnessAgent, RuntimeContext
from harness.messages import Message
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator, estimator_for
from providers.scripted import ScriptedModel

WINDOW = {"full": 32_768, "quick": 16_384, "smoke": 12_288}
"""The window every system gets (smaller in the short modes: litellm's trimming costs the
square of the messages it keeps, per request)."""
RESERVE = 4_096 + 1_024
MESSAGES = {"full": 600, "quick": 300, "smoke": 70}
"""Recorded messages replayed (cut where a request is due)."""
KEEP_FRACTION = 0.35


class Counter:
    """Exact token counts of what a system sends, the same function for every system."""

    def __init__(self, tool_tokens: int) -> None:
        self.estimator: TokenEstimator = estimator_for("gpt-4o", exact=True)
        self.tool_tokens = tool_tokens

    def request(self, messages: Sequence[Message]) -> int:
        """Return the input tokens of ``messages`` (System included) + tools + priming."""
        total = self.tool_tokens + REPLY_PRIMING
        for message in messages:
            if message.id.startswith("render/"):
                digest = hashlib.blake2b(message.text.encode(), digest_size=12).hexdigest()
                message = message.replace(id=f"render/{digest}")
            total += self.estimator.count_message(message)
        return total


def pair_problems(messages: Sequence[Message]) -> int:
    """Return how many tool results lack their call and tool calls their result."""
    problems = 0
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id in open_calls:
                open_calls.discard(message.tool_call_id or "")
            else:
                problems += 1
            continue
        problems += len(open_calls)
        open_calls = {c.id for c in message.tool_calls} if message.role == "assistant" else set()
    return problems + len(open_calls)


def _tally(
    name: str, tokens: list[int], window: int, invalid: int, summary: list[int], **extra: Any
) -> dict[str, Any]:
    return {
        "system": name,
        "requests": len(tokens),
        "agent_tokens": sum(tokens),
        "summary_requests": len(summary),
        "summary_tokens": sum(summary),
        "total_tokens": sum(tokens) + sum(summary),
        "mean_tokens": sum(tokens) / len(tokens) if tokens else 0.0,
        "max_tokens": max(tokens, default=0),
        "overflows": sum(1 for t in tokens if t > window),
        "invalid_pairs": invalid,
        "per_request": tokens,
        **extra,
    }


# ------------------------------------------------------------------------------ ours
async def run_ours(session: Session, window: int, progress: Progress) -> tuple[dict[str, Any], int]:
    """Replay ``session`` through our agent; return its tally and the tool-schema tokens."""
    exact = estimator_for("gpt-4o", exact=True)
    inner = ScriptedModel(
        model="gpt-4o",
        window=window,
        overflow_above=window,
        summary=FIXED_SUMMARY,
        estimator=exact,
        default="(unused)",
    )
    client = ReplayClient(inner, session.messages)
    stack = our_stack()
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as workspace:
        agent = HarnessAgent(
            model=client,
            system_prompt=session.system_prompt,
            tools=replay_tools(session.messages, skip=stack_tool_names(stack)),
            stack=stack,
            workspace=workspace,
            max_rounds=100_000,
        )
        counter = Counter(exact.count_tools(t.schema for t in agent.tools.values()))
        ctx = RuntimeContext(user_id="bench", session_id="tokens-sent")
        last = {"t": time.perf_counter()}

        def report(done: int, total: int) -> None:
            if time.perf_counter() - last["t"] > 5:
                last["t"] = time.perf_counter()
                progress(f"  ours: {done:,}/{total:,} messages replayed")

        outcome = await replay(agent, session, ctx, client, progress=report)
    tokens: list[int] = []
    invalid = 0
    for request in inner.agent_requests:
        rendered = request.render()
        tokens.append(counter.request(rendered))
        invalid += pair_problems(request.history) > 0
    summaries = [
        estimate_request(r, counter.estimator) for r in inner.requests if r.ids.purpose == "summary"
    ]
    tally = _tally(
        "ours",
        tokens,
        window,
        invalid,
        summaries,
        rejected_by_provider=inner.overflows,
        failures=outcome.failures,
        transforms=sorted({t.split(":", 1)[0] for r in inner.agent_requests for t in r.transforms}),
    )
    return tally, counter.tool_tokens


# -------------------------------------------------------------------------- LangChain
def run_langchain(
    session: Session, window: int, counter: Counter, progress: Progress | None = None
) -> dict[str, Any]:
    """Feed ``session`` through LangChain's summarisation and context-editing hooks."""
    limit = window - RESERVE
    summary_tokens: list[int] = []

    def summarize(messages: list[Any]) -> str:
        # What a chat-model summariser would receive: LangChain's own summary prompt around
        # the messages it selected (already trimmed to its summary-input limit).
        prompt = peer.summary_prompt(messages)
        summary_tokens.append(counter.estimator.count(prompt) + MESSAGE_OVERHEAD + REPLY_PRIMING)
        return FIXED_SUMMARY

    peer = LangChainPeer(
        session.system_prompt,
        trigger=[("messages", 50), ("tokens", limit - counter.tool_tokens)],
        keep=("tokens", int(KEEP_FRACTION * limit)),
        summarizer=summarize,
    )
    system_message = Message.system(session.system_prompt)
    originals = {m.id: m for m in session.messages}
    state: list[Any] = []
    cursor = 0
    tokens: list[int] = []
    invalid = 0
    tick = _ticker("LangChain", len(request_points(session.messages)), progress)
    for point in request_points(session.messages):
        tick()
        state.extend(to_langchain(session.messages[cursor:point]))
        cursor = point
        sent = from_langchain(peer.round(state), originals)
        tokens.append(counter.request([system_message, *sent]))
        invalid += pair_problems(sent) > 0
    return _tally("LangChain", tokens, window, invalid, summary_tokens)


# ----------------------------------------------------------------------------- litellm
def run_litellm(
    session: Session, window: int, counter: Counter, progress: Progress | None = None
) -> dict[str, Any]:
    """Trim the whole history with ``litellm.utils.trim_messages`` before every request."""
    trim = trim_messages()
    limit = window - RESERVE - counter.tool_tokens
    by_key = {_key(m.to_openai()): m for m in session.messages}
    system = {"role": "system", "content": session.system_prompt}
    system_message = Message.system(session.system_prompt)
    dicts = [m.to_openai() for m in session.messages]
    sizes = [counter.estimator.count_message(m) for m in session.messages]
    tokens: list[int] = []
    invalid = 0
    tick = _ticker("litellm", len(request_points(session.messages)), progress)
    for point in request_points(session.messages):
        tick()
        start, held = point, 0
        while start > 0 and held < 2 * limit:
            start -= 1
            held += sizes[start]
        kept = trim([system, *dicts[start:point]], model="gpt-4o", max_tokens=limit)
        sent = [
            by_key.get(_key(d)) or Message.from_openai(d) for d in kept if d.get("role") != "system"
        ]
        tokens.append(counter.request([system_message, *sent]))
        invalid += pair_problems(sent) > 0
    return _tally("litellm", tokens, window, invalid, [])


def _ticker(name: str, total: int, progress: Progress | None) -> Callable[[], None]:
    """Return a function to call once per request; it reports progress every 5 seconds."""
    state = {"done": 0, "last": time.perf_counter()}

    def tick() -> None:
        state["done"] += 1
        if progress is not None and time.perf_counter() - state["last"] > 5:
            state["last"] = time.perf_counter()
            progress(f"  {name}: request {state['done']:,}/{total:,}")

    return tick


def _key(data: dict[str, Any]) -> tuple[Any, ...]:
    calls = tuple((c["id"], c["function"]["arguments"]) for c in data.get("tool_calls") or ())
    return (data.get("role"), str(data.get("content")), data.get("tool_call_id"), calls)


# ------------------------------------------------------------------------------ driver
async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Replay one session through every system and count what each sends."""
    window = WINDOW[mode]
    whole = make_session(MESSAGES[mode])
    cut = request_ready(whole.messages, MESSAGES[mode])
    what = (
        whole.description
        if len(cut) == len(whole.messages)
        else f"the first {len(cut)} messages of {whole.description}"
    )
    session = Session(whole.name, whole.source, what, whole.system_prompt, cut, whole.copies)
    progress(f"session: {session.label}")
    ours, tool_tokens = await run_ours(session, window, progress)
    progress(f"ours: {ours['requests']} requests, {ours['total_tokens']:,} tokens")
    counter = Counter(tool_tokens)
    systems = [ours]
    notes: list[str] = []
    for name, runner in (("LangChain", run_langchain), ("litellm", run_litellm)):
        try:
            systems.append(runner(session, window, counter, progress))
            progress(
                f"{name}: {systems[-1]['requests']} requests, "
                f"{systems[-1]['total_tokens']:,} tokens"
            )
        except ImportError as exc:
            notes.append(f"{name} was not run: {exc} (install the bench extra)")
    return _result(mode, session, window, systems, notes)


def _result(
    mode: str, session: Session, window: int, systems: list[dict[str, Any]], notes: list[str]
) -> dict[str, Any]:
    ours = systems[0]
    peers = systems[1:]
    rows = []
    for s in systems:
        ratio = s["total_tokens"] / ours["total_tokens"] if ours["total_tokens"] else float("nan")
        rows.append(
            [
                s["system"],
                s["requests"],
                s["agent_tokens"],
                s["summary_requests"],
                s["summary_tokens"],
                s["total_tokens"],
                f"{ratio:.2f}×",
                round(s["mean_tokens"]),
                s["max_tokens"],
                s["overflows"],
                s["invalid_pairs"],
            ]
        )
    fewer = all(ours["total_tokens"] < p["total_tokens"] for p in peers) if peers else None
    headline = [
        f"window {window:,} tokens (input limit {window - RESERVE:,}), "
        f"{len(request_points(session.messages))} model requests in the recording",
        *(
            f"{s['system']}: {s['total_tokens']:,} input tokens ({s['agent_tokens']:,} in "
            f"{s['requests']} requests + {s['summary_tokens']:,} in {s['summary_requests']} "
            "summary requests), "
            f"{s['overflows']} overflow(s), {s['invalid_pairs']} with invalid tool pairs"
            for s in systems
        ),
    ]
    goals = [
        {
            "goal": "zero overflows (exact count over the window)",
            "met": ours["overflows"] == 0,
            "detail": f"ours: {ours['overflows']} of {ours['requests']} requests over "
            f"{window:,} tokens ({ours.get('rejected_by_provider', 0)} rejected by the "
            "scripted provider and retried)",
        },
        {
            "goal": "fewer tokens than every peer",
            "met": fewer,
            "detail": ", ".join(
                f"{p['system']}/ours = {p['total_tokens'] / max(1, ours['total_tokens']):.2f}×"
                for p in peers
            )
            or "no peer ran",
        },
    ]
    if ours.get("failures"):
        notes.append(f"ours: {len(ours['failures'])} agent call(s) failed: {ours['failures'][:3]}")
    chart = {
        "file": "tokens_sent.png",
        "title": f"Input tokens per request over the replayed session (window {window:,})",
        "x_label": "request",
        "y_label": "input tokens (exact)",
        "series": {
            **{s["system"]: [[i, t] for i, t in enumerate(s["per_request"])] for s in systems},
            "window": [[0, window], [max(s["requests"] for s in systems), window]],
        },
    }
    return {
        "title": "Tokens sent over a replayed session",
        "mode": mode,
        "workload": session.label,
        "measured": (
            "for each model request of the replayed session, the exact o200k token count of what "
            "the system would send (System + history as prepared + state/reference blocks, the "
            f"same tool schemas and reply priming for all); input limit {window - RESERVE:,} "
            f"(window {window:,} − 4,096 output − 1,024 margin)."
        ),
        "headline": headline,
        "goals": goals,
        "tables": [
            {
                "title": "Totals",
                "columns": [
                    "system",
                    "requests",
                    "input tokens",
                    "summary requests",
                    "summary input",
                    "total input",
                    "vs ours",
                    "mean/request",
                    "max/request",
                    "overflows",
                    "invalid pairs",
                ],
                "rows": rows,
                "note": "requests, input tokens, mean and max are the agent's model requests; "
                "summary input is what the summariser reads (ours: the requests compaction sends; "
                "LangChain: its summary prompt around the messages it selected, which it trims to "
                "4,000 tokens by default); total = both. Ours may make more requests than the "
                "recording has replies: an overflow rejected by the provider is retried once "
                "after a forced compaction.",
            }
        ],
        "charts": [chart],
        "notes": notes,
        "data": {s["system"]: {k: v for k, v in s.items() if k != "system"} for s in systems},
    }
