"""Load and memory: many concurrent sessions in one process on the scripted model.

One `HarnessAgent` with ``middleware.default_stack()`` serves N sessions at once (an anyio
task group; 1,000 sessions × 20 rounds in full mode, 100 × 5 with ``--quick``). Each session
is one ``agent.call`` in which the scripted model calls a ``lookup`` tool every round
(real tool outputs from the workload, capped at 4,000 characters) and answers at the end;
its reply yields to the event loop first, as a network call would, so the sessions really
interleave.

Every session owns a unique marker: in its user message, in its tool results and in the
block its **context source** returns (a per-session "customer record" looked up by the
request's session id, after an ``await``). The isolation check scans every request the
model received — its rendered messages and tool-call arguments — and fails on any marker
of another session (a leak) or a missing own marker (lost material).

Figures: rounds per second (all rounds / wall time), preparation time per round (from a
timing middleware outside the stack to the manifest observer, as in ``overhead``) as p50 /
p99, and RSS growth per session (psutil, else ``resource``'s peak RSS) with every session's
state and the scripted model's record of every request still alive. The speed figures are
ratios against a baseline measured in the same run: the same sessions run **one at a
time**.
"""

from __future__ import annotations

import gc
import importlib
import random
import re
import tempfile
import time
from typing import Any

import anyio
import anyio.lowlevel

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.peers import PrepClock, our_stack
from benchmarks.workloads import FIXED_SUMMARY, make_session, tool_results
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.blocks import ContextBlock
from harness.messages import Message
from harness.policy import ContextPolicy
from harness.request import ModelRequest
from harness.tokens import approximate
from harness.tools import ToolContext
from providers.scripted import ScriptedModel

SESSIONS = {"full": 1_000, "quick": 100, "smoke": 12}
ROUNDS = {"full": 20, "quick": 5, "smoke": 3}
REPEATS = {"full": 3, "quick": 2, "smoke": 1}
BASELINE_SESSIONS = {"full": 50, "quick": 20, "smoke": 4}
OUTPUT_CHARS = 4_000
MARK = re.compile(r"MARK-[0-9a-f]{12}")


def rss_bytes() -> tuple[int, str]:
    """Return the process's resident set size and how it was measured."""
    try:
        psutil = importlib.import_module("psutil")
        return int(psutil.Process().memory_info().rss), "psutil RSS"
    except ImportError:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "peak RSS (resource)"


def count_leaks(
    requests: list[ModelRequest], markers: dict[str, str]
) -> tuple[int, int, list[str]]:
    """Return (requests carrying another session's marker, agent requests missing their own,
    up to three examples of leaks)."""
    leaks = 0
    lost = 0
    examples: list[str] = []
    for request in requests:
        own = markers.get(request.ids.session_id)
        found = set(MARK.findall(request_text(request)))
        foreign = found - {own}
        if foreign:
            leaks += 1
            if len(examples) < 3:
                examples.append(f"{request.ids.session_id} saw {sorted(foreign)[:3]}")
        if request.ids.purpose == "agent" and own not in found:
            lost += 1
    return leaks, lost, examples


def request_text(request: ModelRequest) -> str:
    """Return everything of ``request`` the model reads: rendered messages and call arguments."""
    parts: list[str] = []
    for message in request.render():
        parts.append(message.text)
        parts.extend(call.arguments for call in message.tool_calls)
    return "\n".join(parts)


async def run_sessions(
    count: int,
    rounds: int,
    outputs: list[str],
    system: str,
    *,
    concurrent: bool,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run ``count`` sessions of ``rounds`` rounds on one agent; return timings and checks.

    With ``progress``, a bar reports the sessions finished (every 5 seconds at most).
    """
    bar = _report.ProgressBar(progress or (lambda line: None), "sessions done", count, every_s=5)
    from middleware import context_source

    rng = random.Random(seed)
    markers = {f"s{i:05d}": f"MARK-{rng.getrandbits(48):012x}" for i in range(count)}
    served: dict[str, int] = {}
    clock = PrepClock()

    async def account(request: Any) -> list[ContextBlock]:
        await anyio.lowlevel.checkpoint()  # a lookup in the application's store
        marker = markers.get(request.session_id)
        if marker is None:
            return []
        return [ContextBlock.runtime("account", f"Customer record for this session: {marker}")]

    async def reply(request: ModelRequest) -> Message:
        await anyio.lowlevel.checkpoint()  # the provider's latency: other sessions run meanwhile
        session = request.ids.session_id
        served[session] = served.get(session, 0) + 1
        if served[session] < rounds:
            return ScriptedModel.tool_call("lookup", {"query": f"step {served[session]}"})
        return Message.assistant("All steps are done.")

    async def lookup(query: str, context: ToolContext) -> str:
        """Look something up (replayed output).

        Args:
            query: what to look up.
        """
        step = served.get(context.session_id, 0)
        text = outputs[(step + int(context.session_id[1:])) % len(outputs)]
        return f"{text}\n[record {markers[context.session_id]}]"

    model = ScriptedModel(
        model="gpt-4o", default=reply, summary=FIXED_SUMMARY, estimator=approximate()
    )
    with tempfile.TemporaryDirectory(prefix="bench-load-") as workspace:
        agent = HarnessAgent(
            model=model,
            system_prompt=system,
            tools=[lookup],
            stack=[clock, *our_stack(sources=[context_source("account", account)])],
            policy=ContextPolicy(observer=clock.observe),
            workspace=workspace,
            max_rounds=rounds + 2,
        )
        failures: list[str] = []

        async def one(session: str) -> None:
            ctx = RuntimeContext(user_id=f"user-{session}", session_id=session)
            try:
                await agent.call(
                    f"Please work through my request. My reference is {markers[session]}.", ctx
                )
            except Exception as exc:  # a failed session is a finding, not a crash
                failures.append(f"{session}: {type(exc).__name__}: {exc}"[:300])
            bar.step()

        gc.collect()
        rss_before, rss_method = rss_bytes()
        started = time.perf_counter()
        if concurrent:
            async with anyio.create_task_group() as group:
                for session in markers:
                    group.start_soon(one, session)
        else:
            for session in markers:
                await one(session)
        wall = time.perf_counter() - started
        rss_after, _ = rss_bytes()
        leaks, lost, examples = count_leaks(model.requests, markers)
        return {
            "sessions": count,
            "rounds": len(clock.samples),
            "wall_s": wall,
            "rounds_per_s": len(clock.samples) / wall if wall else 0.0,
            "prep": clock.samples,
            "rss_per_session": max(0, rss_after - rss_before) / count,
            "rss_method": rss_method,
            "requests_checked": len(model.requests),
            "leaks": leaks,
            "lost": lost,
            "leak_examples": examples,
            "failures": failures,
        }


async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Run the concurrent sessions and the one-at-a-time baseline."""
    count, rounds = SESSIONS[mode], ROUNDS[mode]
    session = make_session(200)
    outputs = [m.text[:OUTPUT_CHARS] for m in tool_results(session)]
    baseline = await run_sessions(
        BASELINE_SESSIONS[mode],
        rounds,
        outputs,
        session.system_prompt,
        concurrent=False,
        seed=99,
        progress=progress,
    )
    progress(
        f"baseline: {baseline['sessions']} sessions one at a time, "
        f"{baseline['rounds_per_s']:.0f} rounds/s, "
        f"p50 prep {_report.fmt_time(_report.percentile(baseline['prep'], 50))}"
    )
    runs = []
    for repeat in range(REPEATS[mode]):
        result = await run_sessions(
            count,
            rounds,
            outputs,
            session.system_prompt,
            concurrent=True,
            seed=repeat,
            progress=progress,
        )
        runs.append(result)
        progress(
            f"repeat {repeat + 1}/{REPEATS[mode]}: {count} sessions × {rounds} rounds "
            f"in {result['wall_s']:.1f} s, "
            f"{result['rounds_per_s']:.0f} rounds/s, leaks {result['leaks']}, lost {result['lost']}"
        )
        gc.collect()
    return _result(mode, session.label, count, rounds, runs, baseline)


def _percentile_curve(samples: list[float]) -> list[list[float]]:
    """Return ``[percentile, time]`` points, p1 to p99 in steps of 2, then p100."""
    return [[q, _report.percentile(samples, q)] for q in (*range(1, 100, 2), 100)]


def _result(
    mode: str,
    workload: str,
    count: int,
    rounds: int,
    runs: list[dict[str, Any]],
    baseline: dict[str, Any],
) -> dict[str, Any]:
    rps = [r["rounds_per_s"] for r in runs]
    p50 = [_report.percentile(r["prep"], 50) for r in runs]
    p99 = [_report.percentile(r["prep"], 99) for r in runs]
    base_p50 = _report.percentile(baseline["prep"], 50)
    base_p99 = _report.percentile(baseline["prep"], 99)
    rps_ratio = _report.ratio_stats(rps, [baseline["rounds_per_s"]])
    p50_ratio = _report.ratio_stats(p50, [base_p50])
    p99_ratio = _report.ratio_stats(p99, [base_p99])
    rss = runs[0]["rss_per_session"]
    leaks = sum(r["leaks"] for r in runs)
    lost = sum(r["lost"] for r in runs)
    failures = [f for r in runs for f in r["failures"]]
    checked = sum(r["requests_checked"] for r in runs)
    expected = count * rounds
    complete = all(r["rounds"] == expected for r in runs)
    isolated = leaks == 0 and lost == 0 and not failures and complete
    rows = [
        [
            "concurrent",
            count,
            rounds,
            _report.fmt_stats_time(_report.stats([r["wall_s"] for r in runs])),
            f"{_report.stats(rps)['median']:,.0f}",
            _report.fmt_time(_report.stats(p50)["median"]),
            _report.fmt_time(_report.stats(p99)["median"]),
            f"{rss / 1024:,.1f} KiB",
        ],
        [
            "one at a time (baseline)",
            baseline["sessions"],
            rounds,
            _report.fmt_time(baseline["wall_s"]),
            f"{baseline['rounds_per_s']:,.0f}",
            _report.fmt_time(base_p50),
            _report.fmt_time(base_p99),
            f"{baseline['rss_per_session'] / 1024:,.1f} KiB",
        ],
    ]
    rps_med = _report.stats(rps)["median"]
    p50_med = _report.fmt_time(_report.stats(p50)["median"])
    p99_med = _report.fmt_time(_report.stats(p99)["median"])
    headline = [
        f"{count:,} concurrent sessions × {rounds} rounds: {rps_med:,.0f} rounds/s "
        f"({_report.fmt_ratio(rps_ratio)} of the same sessions run one at a time)",
        f"preparation alone (one at a time): p50 {_report.fmt_time(base_p50)}, p99 "
        f"{_report.fmt_time(base_p99)}; under load (includes waiting behind the other "
        f"runnable sessions whenever the stack awaits I/O): p50 {p50_med}, p99 {p99_med}",
        f"RSS growth per session {rss / 1024:,.1f} KiB ({runs[0]['rss_method']})",
        f"isolation: {checked:,} requests checked, {leaks} with another session's marker, "
        f"{lost} missing their own, {len(failures)} failed sessions",
    ]
    return {
        "title": "Load and memory: concurrent sessions",
        "mode": mode,
        "workload": f"tool outputs from {workload} (capped at {OUTPUT_CHARS:,} chars), "
        "one scripted lookup per round",
        "measured": "rounds/s = all rounds / wall time of the task group; preparation = timing "
        "middleware outside the default stack → manifest observer; RSS growth from before the "
        "sessions start to after they end (all states and recorded requests alive), per session; "
        "isolation over every request the model received.",
        "headline": headline,
        "goals": [
            {
                "goal": "no session sees another's material",
                "met": isolated,
                "detail": f"{leaks} leaks, {lost} missing own marker, {len(failures)} failures, "
                f"{sum(r['rounds'] for r in runs):,}/{expected * len(runs):,} rounds completed",
            }
        ],
        "tables": [
            {
                "title": "Throughput, preparation time and memory",
                "columns": [
                    "run",
                    "sessions",
                    "rounds",
                    "wall",
                    "rounds/s",
                    "prep latency p50",
                    "prep latency p99",
                    "RSS/session",
                ],
                "rows": rows,
                "note": "Under load every session is runnable at once (the scripted model answers "
                "after a bare checkpoint), so a round's preparation queues behind the others each "
                "time it awaits its context source or a workspace read: the latency there measures "
                "the saturated event loop; rounds/s is the throughput. RSS per session is measured "
                "in the first concurrent repeat; the baseline's is noise (freed memory is reused).",
            },
            {
                "title": "Concurrent vs one at a time (median, p10–p90 over repeats)",
                "columns": ["figure", "ratio"],
                "rows": [
                    ["rounds/s", _report.fmt_ratio(rps_ratio)],
                    ["prep p50", _report.fmt_ratio(p50_ratio)],
                    ["prep p99", _report.fmt_ratio(p99_ratio)],
                ],
            },
        ],
        "charts": [
            {
                "file": "load_latency.png",
                "title": "Preparation time per round, by percentile",
                "x_label": "percentile of rounds",
                "y_label": "preparation time",
                "y_unit": "s",
                "ylog": True,
                "x_integer": True,
                "series": {
                    f"{count:,} concurrent (first repeat)": _percentile_curve(runs[0]["prep"]),
                    "one at a time (baseline)": _percentile_curve(baseline["prep"]),
                },
            }
        ],
        "notes": [
            *(f"failure: {f}" for f in failures[:5]),
            *(f"leak: {e}" for r in runs for e in r["leak_examples"]),
        ],
        "data": {
            "runs": [{k: v for k, v in r.items() if k != "prep"} for r in runs],
            "baseline": {k: v for k, v in baseline.items() if k != "prep"},
            "prep_p50_s": p50,
            "prep_p99_s": p99,
            "isolated": isolated,
        },
    }
