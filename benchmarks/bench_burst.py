"""A burst of sessions starting at once, and the cold compaction of a long history.

**Burst.** N sessions (1,000 in full mode) start at the same moment: N concurrent
``agent.call`` on one `HarnessAgent` with ``middleware.default_stack()``, distinct user and
session ids, the ``ScriptedModel`` (its answer yields to the event loop first, as a network
call would) and a small workspace built in code (``AGENTS.md``, ``MEMORY.md``, three
knowledge files; the default SQLite session store in it) that has served one call before
(a running service: workspace files cached, offload folder swept; the N sessions are all
new). Figures: the first round's
*stack time* (from a timing middleware outside the stack to the manifest observer, as in
``overhead``) and the whole first call (``agent.call`` to its return: loading the session,
the stack, the model, committing), p50 and p99, against the same sessions run one at a
time in the same run. A second concurrent run without the layers that read the session
store per request shows where the rest of the time goes.

**Cold compaction.** A fresh agent gets a long history (2,000 and 10,000 messages; real
SWE-agent runs replayed back to back when ``../shared`` is present, generated ones
otherwise) and runs one call: the first round compacts the whole early part, the next
rounds append tool results until a second compaction comes. Ours runs
``Compaction(trigger_messages=50, keep_tokens=0, keep_messages=20)``, LangChain v1
``SummarizationMiddleware(trigger=("messages", 50), keep=("messages", 20))`` on the same
messages (as in ``overhead``). Counted: summary requests and their input tokens (the fast
o200k estimate, both sides) against the history's own size, the second compaction's summary
tokens against what was added since the first, and the first round's time on each side.
LangChain's summariser sees at most ``trim_tokens_to_summarize`` (4,000) tokens of the early
part — it drops the rest — so its summary tokens are not the same work as ours.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from benchmarks import _report
from benchmarks._report import Mode, Progress, ProgressBar
from benchmarks.peers import LangChainPeer, PrepClock, our_stack, to_langchain
from benchmarks.workloads import FIXED_SUMMARY, Session, history, tool_results
from harness.accounting import estimate_request
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.messages import Message
from harness.policy import ContextPolicy
from harness.request import ModelRequest
from harness.tokens import approximate
from providers.scripted import ScriptedModel

SESSIONS = {"full": 1_000, "quick": 300, "smoke": 20}
BASELINE_SESSIONS = {"full": 100, "quick": 50, "smoke": 5}
REPEATS = {"full": 3, "quick": 2, "smoke": 1}
COLD_SIZES = {"full": (2_000, 10_000), "quick": (2_000,), "smoke": (150,)}
COLD_REPEATS = {"full": 3, "quick": 2, "smoke": 1}
WARM_ROUNDS = 16
"""Rounds after the cold one: enough for the history to reach the trigger again."""
TRIGGER_MESSAGES = 50
KEEP_MESSAGES = 20
GOAL_P99_S = 0.050
STORE_READERS = ("FragmentEditor",)
"""Default-stack layers that read the session store on every request (cached per fragment set)."""
SYSTEM = "You are a careful software engineer working in the user's repository."
WORKSPACE_FILES = {
    "AGENTS.md": "Run the test suite before you answer. Keep changes small.\n" * 8,
    "MEMORY.md": "- the project uses pytest and ruff\n- CI runs on Python 3.11\n",
    "knowledge/style.md": "Short functions, names that say what things are.\n" * 10,
    "knowledge/errors.md": "Every error says what to do next.\n" * 10,
    "knowledge/api/endpoints.md": "GET /items lists items; POST /items creates one.\n" * 10,
}


# ----------------------------------------------------------------------------- burst
def small_workspace(root: Path) -> None:
    """Write the burst's small workspace into ``root``."""
    for name, text in WORKSPACE_FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, "utf-8")


def user_texts(session: Session) -> list[str]:
    """Return the tasks the sessions start with: the workload's user messages (≤ 4,000 chars)."""
    texts = [m.text[:4_000] for m in session.messages if m.role == "user" and m.text.strip()]
    return texts or ["Fix the failing test in tests/test_api.py."]


async def run_burst(
    count: int, texts: Sequence[str], *, concurrent: bool, without: Sequence[str] = ()
) -> dict[str, Any]:
    """Start ``count`` sessions on one agent (at once or one at a time); time their first call."""
    clock = PrepClock()

    async def reply(request: ModelRequest) -> Message:
        await anyio.lowlevel.checkpoint()  # the provider's latency: other sessions run meanwhile
        return Message.assistant("Done.")

    with tempfile.TemporaryDirectory(prefix="bench-burst-") as folder:
        small_workspace(Path(folder))
        model = ScriptedModel(model="gpt-4o", default=reply, estimator=approximate())
        stack = [m for m in our_stack() if type(m).__name__ not in without]
        agent = HarnessAgent(
            model=model,
            system_prompt=SYSTEM,
            stack=[clock, *stack],
            policy=ContextPolicy(observer=clock.observe),
            workspace=folder,
        )
        # A running service: the agent has served a call before (its workspace files are
        # cached, its folder swept); the N sessions themselves are all new.
        await agent.call("Hello.", RuntimeContext(user_id="warm-up", session_id="warm-up"))
        clock.samples.clear()
        clock.by_session.clear()
        calls: list[float] = []
        failures: list[str] = []

        async def one(i: int) -> None:
            ctx = RuntimeContext(user_id=f"user-{i:05d}", session_id=f"s{i:05d}")
            started = time.perf_counter()
            try:
                await agent.call(texts[i % len(texts)], ctx)
            except Exception as exc:  # a failed session is a finding, not a crash
                failures.append(f"s{i:05d}: {type(exc).__name__}: {exc}"[:300])
            calls.append(time.perf_counter() - started)

        gc.collect()
        started = time.perf_counter()
        if concurrent:
            async with anyio.create_task_group() as group:
                for i in range(count):
                    group.start_soon(one, i)
        else:
            for i in range(count):
                await one(i)
        wall = time.perf_counter() - started
    first = [samples[0] for samples in clock.by_session.values() if samples]
    return {
        "sessions": count,
        "wall_s": wall,
        "stack": first,
        "call": calls,
        "failures": failures,
        "layers": [type(m).__name__ for m in stack],
    }


def _burst_figures(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median over repeats of each run's p50 and p99 (stack and whole call)."""
    figures: dict[str, float] = {}
    for key in ("stack", "call"):
        for q in (50, 99):
            values = [_report.percentile(r[key], q) for r in runs if r[key]]
            figures[f"{key}_p{q}"] = _report.stats(values)["median"] if values else float("nan")
    return figures


async def measure_burst(mode: Mode, progress: Progress, texts: list[str]) -> dict[str, Any]:
    """Run the burst, its one-at-a-time baseline and the run without store readers."""
    count = SESSIONS[mode]
    present = [n for n in STORE_READERS if any(type(m).__name__ == n for m in our_stack())]
    baseline = await run_burst(BASELINE_SESSIONS[mode], texts, concurrent=False)
    progress(
        f"baseline: {baseline['sessions']} sessions one at a time, first-round stack p99 "
        f"{_report.fmt_time(_report.percentile(baseline['stack'], 99))}"
    )
    bar = ProgressBar(progress, "bursts", REPEATS[mode] * (2 if present else 1))
    default_runs: list[dict[str, Any]] = []
    lean_runs: list[dict[str, Any]] = []
    for _ in range(REPEATS[mode]):
        run = await run_burst(count, texts, concurrent=True)
        default_runs.append(run)
        bar.step(
            f"{count:,} at once: stack p99 {_report.fmt_time(_report.percentile(run['stack'], 99))}"
        )
        if present:
            run = await run_burst(count, texts, concurrent=True, without=present)
            lean_runs.append(run)
            bar.step(
                f"without {', '.join(present)}: stack p99 "
                f"{_report.fmt_time(_report.percentile(run['stack'], 99))}"
            )
        gc.collect()
    return {
        "count": count,
        "baseline": baseline,
        "default": default_runs,
        "lean": lean_runs,
        "without": present,
    }


# ----------------------------------------------------------------------- compaction
async def measure_ours(session: Session, outputs: list[Message]) -> dict[str, Any]:
    """One call on a fresh agent: the cold round, then warm rounds up to a second compaction."""
    from middleware import default_stack
    from middleware.compaction import Compaction

    est = approximate()
    clock = PrepClock()
    rounds = {"agent": 0}
    compaction_of: list[int] = []  # per summary request: the agent requests made before it

    def reply(request: ModelRequest) -> Message:
        rounds["agent"] += 1
        if rounds["agent"] <= WARM_ROUNDS:
            return ScriptedModel.tool_call("bash", {"command": f"step {rounds['agent']}"})
        return Message.assistant("Done.")

    def summarise(request: ModelRequest) -> str:
        compaction_of.append(rounds["agent"])
        return FIXED_SUMMARY

    async def bash(command: str) -> str:
        """Run a shell command (replayed output).

        Args:
            command: the command line.
        """
        return outputs[rounds["agent"] % len(outputs)].text

    model = ScriptedModel(model="gpt-4o", default=reply, summary=summarise, estimator=est)
    compaction = Compaction(
        trigger_messages=TRIGGER_MESSAGES, keep_tokens=0, keep_messages=KEEP_MESSAGES
    )
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as folder:
        agent = HarnessAgent(
            model=model,
            system_prompt=session.system_prompt,
            tools=[bash],
            stack=[clock, *default_stack(compaction=compaction)],
            policy=ContextPolicy(observer=clock.observe),
            workspace=folder,
            max_rounds=WARM_ROUNDS + 2,
        )
        ctx = RuntimeContext(user_id="bench", session_id="cold")
        agent.state(ctx).append(*session.messages)
        gc.collect()
        await agent.call("Continue with the task.", ctx)
    summaries = [r for r in model.requests if r.ids.purpose == "summary"]
    tokens = [estimate_request(r, est) for r in summaries]
    first = [t for t, at in zip(tokens, compaction_of, strict=True) if at == 0]
    later = [t for t, at in zip(tokens, compaction_of, strict=True) if at > 0]
    added = [m for r in range(WARM_ROUNDS) for m in _warm_messages(r, outputs)]
    return {
        "cold_s": clock.samples[0],
        "history_tokens": est.count_messages(session.messages),
        "requests": len(first),
        "summary_tokens": sum(first),
        "second_requests": len(later),
        "second_tokens": sum(later),
        "added_tokens": est.count_messages(added),
    }


def _warm_messages(step: int, outputs: list[Message]) -> list[Message]:
    """A warm round's tool call and result, as the agent appends them (for their size)."""
    call = ScriptedModel.tool_call("bash", {"command": f"step {step + 1}"})
    result = Message.tool(call.tool_calls[0].id, outputs[(step + 1) % len(outputs)].text)
    return [call, result]


def measure_langchain(session: Session) -> dict[str, Any] | None:
    """LangChain's first round on the same history; ``None`` when LangChain is not installed."""
    try:
        import langchain.agents.middleware  # noqa: F401
    except ImportError:
        return None
    est = approximate()
    seen: list[list[Any]] = []

    def summarizer(messages: list[Any]) -> str:
        seen.append(list(messages))
        return FIXED_SUMMARY

    peer = LangChainPeer(
        session.system_prompt,
        trigger=("messages", TRIGGER_MESSAGES),
        keep=("messages", KEEP_MESSAGES),
        summarizer=summarizer,
    )
    messages = to_langchain(session.messages)
    gc.collect()
    started = time.perf_counter()
    peer.round(messages)
    cold = time.perf_counter() - started
    return {
        "cold_s": cold,
        "requests": len(seen),
        "summary_tokens": sum(est.count(peer.summary_prompt(m)) for m in seen),
    }


async def measure_cold(mode: Mode, progress: Progress) -> tuple[list[dict[str, Any]], str]:
    """Cold compaction at each size: ours and LangChain, ``COLD_REPEATS`` times."""
    rows: list[dict[str, Any]] = []
    label = ""
    sizes = COLD_SIZES[mode]
    bar = ProgressBar(progress, "cold compactions", len(sizes) * COLD_REPEATS[mode])
    for n in sizes:
        session = history(n)
        label = session.label
        outputs = tool_results(session) or [Message.tool("x", "ok")]
        ours: list[dict[str, Any]] = []
        peer: list[dict[str, Any]] = []
        for _ in range(COLD_REPEATS[mode]):
            ours.append(await measure_ours(session, outputs))
            theirs = measure_langchain(session)
            if theirs is not None:
                peer.append(theirs)
            bar.step(f"{n:,} messages: ours {_report.fmt_time(ours[-1]['cold_s'])}")
        rows.append({"messages": n, "ours": ours, "langchain": peer})
    return rows, label


# --------------------------------------------------------------------------- report
async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Run the burst and the cold compactions; return the result."""
    workload = history(200)
    # One-time costs of the process (imports, tables, the exact tokenizer that compaction
    # near the limit loads) are paid before anything is timed.
    await run_burst(1, user_texts(workload), concurrent=False)
    if mode != "smoke":  # the smoke run's history stays far from the limit
        approximate().exact_counter  # noqa: B018 - loads the o200k tokenizer once
    burst = await measure_burst(mode, progress, user_texts(workload))
    cold, cold_label = await measure_cold(mode, progress)
    return _result(mode, workload.label, burst, cold, cold_label)


def _result(
    mode: Mode,
    label: str,
    burst: dict[str, Any],
    cold: list[dict[str, Any]],
    cold_label: str,
) -> dict[str, Any]:
    count = burst["count"]
    default = _burst_figures(burst["default"])
    base = _burst_figures([burst["baseline"]])
    lean = _burst_figures(burst["lean"]) if burst["lean"] else None
    ms = _report.fmt_time
    burst_rows: list[list[Any]] = [
        [
            f"{count:,} at once, default stack",
            ms(default["stack_p50"]),
            ms(default["stack_p99"]),
            ms(default["call_p50"]),
            ms(default["call_p99"]),
        ],
        [
            f"{burst['baseline']['sessions']:,} one at a time, default stack (baseline)",
            ms(base["stack_p50"]),
            ms(base["stack_p99"]),
            ms(base["call_p50"]),
            ms(base["call_p99"]),
        ],
    ]
    if lean is not None:
        burst_rows.append(
            [
                f"{count:,} at once, without {', '.join(burst['without'])}",
                ms(lean["stack_p50"]),
                ms(lean["stack_p99"]),
                ms(lean["call_p50"]),
                ms(lean["call_p99"]),
            ]
        )
    cold_rows: list[list[Any]] = []
    cold_data: list[dict[str, Any]] = []
    for row in cold:
        ours = row["ours"]
        ours_s = [r["cold_s"] for r in ours]
        last = ours[-1]
        peer = row["langchain"]
        peer_s = [r["cold_s"] for r in peer]
        ratio = _report.ratio_stats(peer_s, ours_s) if peer else None
        share = last["summary_tokens"] / last["history_tokens"] if last["history_tokens"] else 0.0
        cold_rows.append(
            [
                f"{row['messages']:,}",
                f"{last['history_tokens']:,}",
                _report.fmt_stats_time(_report.stats(ours_s)),
                last["requests"],
                f"{last['summary_tokens']:,} ({share:.2f}×)",
                f"{last['second_requests']} / {last['second_tokens']:,}",
                f"{last['added_tokens']:,}",
                _report.fmt_stats_time(_report.stats(peer_s)) if peer else "n/a",
                _report.fmt_ratio(ratio) if ratio else "n/a",
                f"{peer[-1]['requests']} / {peer[-1]['summary_tokens']:,}" if peer else "n/a",
            ]
        )
        cold_data.append(
            {"messages": row["messages"], "ours": ours, "langchain": peer, "ratio": ratio}
        )
    met = default["stack_p99"] <= GOAL_P99_S
    failures = [f for r in [*burst["default"], *burst["lean"]] for f in r["failures"]]
    largest = cold[-1]
    headline = [
        f"{count:,} sessions starting at once, default stack: first-round stack time p50 "
        f"{ms(default['stack_p50'])}, p99 {ms(default['stack_p99'])}; whole first call p50 "
        f"{ms(default['call_p50'])}, p99 {ms(default['call_p99'])} (one at a time: stack p99 "
        f"{ms(base['stack_p99'])}, call p99 {ms(base['call_p99'])})",
    ]
    if lean is not None:
        headline.append(
            f"without {', '.join(burst['without'])} (the layer that reads the session store, "
            f"cached per fragment set): stack p50 {ms(lean['stack_p50'])}, p99 {ms(lean['stack_p99'])}"
        )
    big = largest["ours"][-1]
    headline.append(
        f"cold compaction of {largest['messages']:,} messages: {big['requests']} summary requests "
        f"over {big['summary_tokens']:,} tokens ({big['summary_tokens'] / max(1, big['history_tokens']):.2f}× "
        f"the history's {big['history_tokens']:,}); the next compaction sent "
        f"{big['second_tokens']:,} tokens for {big['added_tokens']:,} added"
    )
    return {
        "title": "Burst of sessions and cold compaction",
        "mode": mode,
        "workload": f"burst: tasks from {label}, a small generated workspace; "
        f"cold compaction: {cold_label}",
        "measured": "stack time = timing middleware outside the default stack → manifest "
        "observer, first round of each session; whole call = agent.call to its return (session "
        "load, stack, model, commit) with the default SQLite store in the workspace; each burst "
        "on a fresh agent and workspace, in a process that already ran one call and loaded the "
        "o200k tokenizer; summary tokens = fast o200k estimate of every summary request (both "
        "sides).",
        "headline": headline,
        "goals": [
            {
                "goal": f"burst of {count:,}: first-round stack p99 ≤ {ms(GOAL_P99_S)}",
                "met": met if mode == "full" else None,
                "detail": f"p99 {ms(default['stack_p99'])} (median of {len(burst['default'])} "
                f"repeats), default stack; {len(failures)} failed sessions",
            },
            {
                "goal": "cold compaction sends each message's text in at most one summary request",
                "met": all(
                    r["ours"][-1]["summary_tokens"] <= 1.1 * r["ours"][-1]["history_tokens"]
                    for r in cold
                ),
                "detail": "summary input tokens ≤ 1.1 × the history's own (prompts included); "
                "per-message check: tests/test_cold_compaction.py",
            },
        ],
        "tables": [
            {
                "title": "Burst: first round of each session",
                "columns": ["run", "stack p50", "stack p99", "whole call p50", "whole call p99"],
                "rows": burst_rows,
                "note": "p50/p99 per run, median over the repeats. The whole call includes "
                "loading and committing the session (SQLite in worker threads) and waiting behind "
                "every other runnable session.",
            },
            {
                "title": "Cold compaction: ours vs LangChain's SummarizationMiddleware",
                "columns": [
                    "messages",
                    "history tokens",
                    "ours first round",
                    "ours summary requests",
                    "ours summary tokens (÷ history)",
                    "2nd compaction requests / tokens",
                    "tokens added before it",
                    "LangChain first round",
                    "LangChain ÷ ours (time)",
                    "LangChain requests / tokens",
                ],
                "rows": cold_rows,
                "note": "Ours summarises the whole early part, each message once, in chunks "
                "below the summariser's limit, then merges the partial summaries (the longest "
                "prefix that fits the model's limit is asked in place, as the agent's own "
                "conversation); the next compaction is asked in place: System, tools, that summary "
                "(the task is in it: a newer user turn came) and the messages that left the kept "
                "range since (the 20 the "
                "first one kept and the early part of what was added), then one instruction — "
                "all but the instruction the start of the agent's previous request, which a "
                "provider's prompt cache serves (so it sends more tokens than were added, mostly "
                "cached). LangChain sends one request with at most 4,000 tokens of the early part "
                "and drops the rest; 0 requests means its trim left nothing to summarise (the "
                "newest early messages alone were over 4,000 tokens) and it replaced the early "
                "part with 'Previous conversation was too long to summarize.'",
            },
        ],
        "charts": [
            {
                "file": "burst_latency.png",
                "title": f"Burst of {count:,} sessions: first-round time",
                "kind": "bar",
                "categories": ["stack p50", "stack p99", "call p50", "call p99"],
                "series": {
                    "at once": [
                        default["stack_p50"],
                        default["stack_p99"],
                        default["call_p50"],
                        default["call_p99"],
                    ],
                    "one at a time": [
                        base["stack_p50"],
                        base["stack_p99"],
                        base["call_p50"],
                        base["call_p99"],
                    ],
                },
                "y_label": "time",
                "y_unit": "s",
                "ylog": True,
            }
        ],
        "notes": [f"failure: {f}" for f in failures[:5]],
        "data": {
            "burst": {
                "default": default,
                "baseline": base,
                "lean": lean,
                "without": burst["without"],
                "layers": burst["default"][0]["layers"],
            },
            "cold": cold_data,
        },
    }
