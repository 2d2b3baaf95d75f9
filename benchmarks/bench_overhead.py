"""Per-round preparation overhead: our default stack vs LangChain's middleware and litellm.

What is timed, per system, on the same history of N messages (100 to 10,000):

- **ours** — a real `HarnessAgent` with ``middleware.default_stack()`` on the
  ``ScriptedModel`` (workspace in a temporary folder). The history is put into the
  session state, then one ``agent.call`` runs rounds in which the model calls a tool whose
  result is a real tool output from the workload. A timing middleware placed *outside* the
  whole stack stamps the start of each round's preparation and the policy's manifest
  observer stamps its end — the moment the agent's innermost handler has built the
  manifest and is about to call the client. So the figure covers every middleware, the
  summariser calls compaction makes (answered at once by the scripted model) and the
  manifest, and excludes the model call and tool execution. *Cold* is the first round of a
  fresh agent (empty token caches, nothing offloaded or compacted yet); *warm* is each next
  round, after one tool call and its result were appended. The agent commits what the stack
  prepared, so with the default ``Compaction`` (trigger: 50 messages) the cold round
  compacts a long history and warm rounds start from the compacted one; the table shows how
  many messages each round actually sent.
- **ours, no compaction** — the same stack without ``Compaction`` and with a window large
  enough that nothing is dropped: every warm round prepares the *whole* N-message history,
  which shows the per-message constant of the cached counts (the O(N) part).
- **LangChain** — ``SummarizationMiddleware.before_model`` (a fake chat model, a
  summariser that returns a fixed text, and a trigger it never reaches, so what is timed is
  the per-round check) plus ``ContextEditingMiddleware(edits=[ClearToolUsesEdit()])
  .wrap_model_call`` with a handler that returns a canned response at once — the two hooks a
  LangChain v1 agent runs before each model call, on LangChain messages that already carry
  ids (as LangGraph's state holds them). LangGraph's own per-step cost is not included.
- **litellm** — ``litellm.utils.trim_messages`` on OpenAI dicts with ``max_tokens`` equal to
  our input limit (it trims when the history is longer).

Every speed figure is a ratio measured in the same run: peer time / our time per repeat
(paired: the same history, the same repeat), median and p10–p90 over the repeats.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.peers import (
    LangChainPeer,
    PrepClock,
    has_compaction,
    to_langchain,
    to_openai,
    trim_messages,
)
from benchmarks.peers import (
    our_stack as our_stack,  # bench_sessions imports it from here; its home is peers
)
from benchmarks.workloads import FIXED_SUMMARY, Session, history, tool_results
from harness.agent import HarnessAgent, RuntimeContext
from harness.messages import Message
from harness.policy import ContextPolicy
from harness.request import ModelRequest
from harness.tokens import approximate
from providers.scripted import ScriptedModel

WINDOW = 128_000
"""The model window every system is configured for (ours: input limit = window − 5,120)."""
HUGE_WINDOW = 50_000_000
"""The window of the no-compaction variant: large enough that nothing is ever dropped."""
SIZES = {
    "full": (100, 300, 1_000, 2_000, 5_000, 10_000),
    "quick": (100, 300, 2_000),
    "smoke": (40, 120),
}
COLD_REPEATS = {"full": 5, "quick": 3, "smoke": 2}
WARM_ROUNDS = {"full": 12, "quick": 6, "smoke": 3}
PEER_CAP_S = {"full": 20.0, "quick": 4.0, "smoke": 2.0}
"""A peer whose round (or repeat) takes longer than this is not run again on this or larger
histories; its warm rounds are cut to `SLOW_WARM` once a cold round takes half of it."""
SLOW_WARM = {"full": 1, "quick": 0, "smoke": 0}
GOAL_SIZE = 2_000
GOAL_RATIO = 20.0
FLAT_LIMIT = 2.0
"""'Flat': warm time at the largest history at most this many times that at the smallest."""


# ------------------------------------------------------------------------ systems
async def measure_ours(
    session: Session, outputs: list[Message], warm: int, workdir: Path, *, compaction: bool = True
) -> dict[str, Any]:
    """Run one fresh agent on ``session``: the cold round then ``warm`` warm rounds."""
    clock = PrepClock()
    served = {"rounds": 0}

    def reply(request: ModelRequest) -> Message:
        served["rounds"] += 1
        if served["rounds"] <= warm:
            return ScriptedModel.tool_call("bash", {"command": f"step {served['rounds']}"})
        return Message.assistant("Done.")

    async def bash(command: str) -> str:
        """Run a shell command (replayed output).

        Args:
            command: the command line.
        """
        return outputs[(served["rounds"] - 1) % len(outputs)].text

    model = ScriptedModel(
        model="gpt-4o",
        window=WINDOW if compaction else HUGE_WINDOW,
        default=reply,
        summary=FIXED_SUMMARY,
        estimator=approximate(),
    )
    agent = HarnessAgent(
        model=model,
        system_prompt=session.system_prompt,
        tools=[bash],
        stack=[clock, *our_stack(compaction=compaction)],
        policy=ContextPolicy(observer=clock.observe),
        workspace=tempfile.mkdtemp(dir=workdir),
        max_rounds=warm + 2,
    )
    ctx = RuntimeContext(user_id="bench", session_id="overhead")
    agent.state(ctx).append(*session.messages)
    gc.collect()
    await agent.call("Continue with the task.", ctx)
    sent = [len(r.history) for r in model.agent_requests]
    return {
        "cold": clock.samples[0],
        "warm": clock.samples[1:],
        "sent_cold": sent[0] if sent else 0,
        "sent_warm": sent[-1] if len(sent) > 1 else 0,
        "transforms": list(model.agent_requests[0].transforms) if sent else [],
    }


LANGCHAIN_TRIGGER = ("tokens", 10**12)
"""Never reached: what is timed is LangChain's per-round check, as for our warm rounds."""


def langchain_peer(system: str) -> LangChainPeer:
    """Return the LangChain peer this benchmark times (keep: the last 20 messages)."""
    return LangChainPeer(system, trigger=LANGCHAIN_TRIGGER, keep=("messages", 20))


def _timed_round(peer: LangChainPeer, messages: list[Any]) -> float:
    started = time.perf_counter()
    peer.round(messages)
    return time.perf_counter() - started


def measure_langchain(
    session: Session, outputs: list[Message], warm: int, cap: float, slow_warm: int = 1
) -> dict[str, Any]:
    """Time the LangChain hooks: the first round on the history, then warm rounds."""
    from langchain_core.messages import AIMessage, ToolMessage

    peer = langchain_peer(session.system_prompt)
    messages = to_langchain(session.messages)
    gc.collect()
    cold = _timed_round(peer, messages)
    sent_cold = len(peer.sent)
    samples: list[float] = []
    spent = cold
    rounds = slow_warm if cold > cap / 2 else warm
    for step in range(1, rounds + 1):
        if spent > cap and samples:
            break
        call_id = f"call_warm_{step}"
        messages.append(
            AIMessage(
                content="",
                tool_calls=[{"name": "bash", "args": {"command": f"step {step}"}, "id": call_id}],
            )
        )
        messages.append(
            ToolMessage(content=outputs[(step - 1) % len(outputs)].text, tool_call_id=call_id)
        )
        samples.append(_timed_round(peer, messages))
        spent += samples[-1]
    return {"cold": cold, "warm": samples, "sent_cold": sent_cold, "sent_warm": len(peer.sent)}


def measure_litellm(
    session: Session, outputs: list[Message], warm: int, cap: float, slow_warm: int = 1
) -> dict[str, Any]:
    """Time ``litellm.utils.trim_messages`` with our input limit, cold then warm."""
    trim = trim_messages()
    limit = WINDOW - 4096 - 1024
    dicts = to_openai(session.messages, session.system_prompt)
    gc.collect()
    started = time.perf_counter()
    kept = trim(dicts, model="gpt-4o", max_tokens=limit)
    cold = time.perf_counter() - started
    sent_cold = len(kept)
    samples: list[float] = []
    spent = cold
    rounds = slow_warm if cold > cap / 2 else warm
    for step in range(1, rounds + 1):
        if spent > cap and samples:
            break
        call_id = f"call_warm_{step}"
        dicts.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            }
        )
        dicts.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": outputs[(step - 1) % len(outputs)].text,
            }
        )
        started = time.perf_counter()
        kept = trim(dicts, model="gpt-4o", max_tokens=limit)
        samples.append(time.perf_counter() - started)
        spent += samples[-1]
    return {"cold": cold, "warm": samples, "sent_cold": sent_cold, "sent_warm": len(kept)}


def _litellm_trims(session: Session) -> bool:
    """Return whether ``trim_messages`` would have to trim ``session`` (its slow path)."""
    limit = WINDOW - 4096 - 1024
    return approximate().count_messages(session.messages) > limit


# --------------------------------------------------------------------------- driver
def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Measure the per-round preparation overhead (see the module docstring)."""
    sizes = SIZES[mode]
    repeats = COLD_REPEATS[mode]
    warm = WARM_ROUNDS[mode]
    cap = PEER_CAP_S[mode]
    systems = ["ours"]
    if has_compaction():
        systems.append("ours, no compaction")
    peers = ["LangChain", "litellm"]
    skipped: dict[str, int] = {}
    trim_skipped: set[int] = set()
    raw: dict[str, dict[int, list[dict[str, Any]]]] = {s: {} for s in [*systems, *peers]}
    memory: dict[int, dict[str, int]] = {}
    workload = ""
    langchain_peer("")  # import the peers before anything is timed
    trim_messages()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        workdir = Path(tmp)
        for n in sizes:
            session = history(n)
            workload = session.label
            outputs = tool_results(session)
            progress(f"history of {len(session.messages):,} messages ({session.chars:,} chars)")
            for rep in range(repeats):
                for system in systems:
                    result = await measure_ours(
                        session, outputs, warm, workdir, compaction=system == "ours"
                    )
                    raw[system].setdefault(n, []).append(result)
                for peer in peers:
                    if peer in skipped:
                        continue
                    if peer == "litellm" and mode != "full" and _litellm_trims(session):
                        skipped[peer] = n
                        trim_skipped.add(n)
                        continue
                    measure = measure_langchain if peer == "LangChain" else measure_litellm
                    result = measure(session, outputs, warm, cap, SLOW_WARM[mode])
                    raw[peer].setdefault(n, []).append(result)
                    if result["cold"] + sum(result["warm"]) > cap:
                        skipped[peer] = n
                progress(
                    f"  n={n:,} repeat {rep + 1}/{repeats}: ours warm "
                    f"{_report.fmt_time(_median(raw['ours'][n][-1]['warm']))}"
                    + "".join(
                        f", {p} warm {_report.fmt_time(_median(raw[p][n][-1]['warm']))}"
                        for p in peers
                        if n in raw[p] and len(raw[p][n]) == rep + 1
                    )
                )
            memory[n] = await _memory_peak(session, outputs, warm, workdir)
            progress(
                f"  n={n:,}: ours, peak traced memory {memory[n]['peak_bytes'] / 2**20:,.1f} MiB"
            )
    result = _result(mode, sizes, raw, systems, peers, skipped, workload, cap)
    _add_memory(result, memory)
    if trim_skipped:
        result["notes"] = [
            n for n in result["notes"] if not n.startswith("litellm was not run again")
        ] + [
            f"litellm was not run from {min(trim_skipped):,} messages on in {mode} mode: the "
            "history exceeds its limit there, and its trimming (which recounts the kept "
            "messages once per message it adds) takes tens of seconds per round; the full run "
            "measures it"
        ]
    return result


async def _memory_peak(
    session: Session, outputs: list[Message], warm: int, workdir: Path
) -> dict[str, int]:
    """Return the peak memory our stack allocates over one call (cold round + warm rounds).

    Measured with tracemalloc in a separate, untimed run; the session's own messages exist
    before the measurement starts, so the peak is what preparation adds on top of them.
    """
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        await measure_ours(session, outputs, warm, workdir)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return {"peak_bytes": peak, "messages": len(session.messages), "history_chars": session.chars}


def _add_memory(result: dict[str, Any], memory: dict[int, dict[str, int]]) -> None:
    """Add the memory-peak table and headline to ``result``."""
    if not memory:
        return
    rows = [
        [
            f"{m['messages']:,}",
            f"{m['history_chars']:,}",
            f"{m['peak_bytes'] / 2**20:,.2f}",
            f"{m['peak_bytes'] / max(1, m['history_chars']):.2f}",
        ]
        for m in memory.values()
    ]
    result.setdefault("tables", []).append(
        {
            "title": "ours: peak memory added by one call (cold round + warm rounds, tracemalloc)",
            "columns": ["messages", "history chars", "peak MiB", "peak bytes per history char"],
            "rows": rows,
        }
    )
    largest = memory[max(memory)]
    result.setdefault("headline", []).append(
        f"ours: peak memory of one call at {largest['messages']:,} messages: "
        f"{largest['peak_bytes'] / 2**20:,.1f} MiB "
        f"({largest['peak_bytes'] / max(1, largest['history_chars']):.2f} bytes per history character)"
    )
    result.setdefault("data", {})["memory_peak"] = {str(n): m for n, m in memory.items()}


def _result(
    mode: str,
    sizes: tuple[int, ...],
    raw: dict[str, dict[int, list[dict[str, Any]]]],
    systems: list[str],
    peers: list[str],
    skipped: dict[str, int],
    workload: str,
    cap: float,
) -> dict[str, Any]:
    every = [*systems, *peers]
    time_rows = []
    ratio_rows = []
    data: dict[str, Any] = {}
    for n in sizes:
        ours_runs = raw["ours"].get(n, [])
        ours_warm = [_median(r["warm"]) for r in ours_runs]
        ours_cold = [r["cold"] for r in ours_runs]
        for system in every:
            runs = raw[system].get(n)
            if not runs:
                time_rows.append([n, system, "skipped", "–", "–", "–", "–"])
                continue
            cold = [r["cold"] for r in runs]
            warm_all = [x for r in runs for x in r["warm"]]
            warm_med = [_median(r["warm"]) for r in runs]
            cold_s = _report.stats(cold)
            warm_s = _report.stats(warm_all)
            warm_vs_cold = _report.ratio_stats(warm_med, cold)
            time_rows.append(
                [
                    n,
                    system,
                    _report.fmt_stats_time(cold_s),
                    _report.fmt_stats_time(warm_s),
                    _report.fmt_ratio(warm_vs_cold),
                    runs[-1]["sent_cold"],
                    runs[-1]["sent_warm"],
                ]
            )
            entry = {"cold": cold_s, "warm": warm_s, "warm_over_cold": warm_vs_cold}
            if system != "ours":
                entry["warm_ratio_vs_ours"] = _report.ratio_stats(warm_med, ours_warm)
                entry["cold_ratio_vs_ours"] = _report.ratio_stats(cold, ours_cold)
                ratio_rows.append(
                    [
                        n,
                        system,
                        _report.fmt_ratio(entry["cold_ratio_vs_ours"]),
                        _report.fmt_ratio(entry["warm_ratio_vs_ours"]),
                    ]
                )
            data.setdefault(system, {})[str(n)] = entry
    headline: list[str] = []
    goals: list[dict[str, Any]] = []
    goal_n = GOAL_SIZE if GOAL_SIZE in sizes else None
    lc_goal = data.get("LangChain", {}).get(str(goal_n)) if goal_n else None
    if lc_goal is not None:
        ratio = lc_goal["warm_ratio_vs_ours"]
        met = ratio["median"] >= GOAL_RATIO
        detail = (
            f"LangChain/ours warm at {goal_n:,} messages: {_report.fmt_ratio(ratio)} "
            f"(LangChain {_report.fmt_time(lc_goal['warm']['median'])}, ours "
            f"{_report.fmt_time(data['ours'][str(goal_n)]['warm']['median'])} per round)"
        )
        goals.append(
            {
                "goal": f"≥ {GOAL_RATIO:.0f}× faster than LangChain warm at {GOAL_SIZE:,} messages",
                "met": met,
                "detail": detail,
            }
        )
        headline.append(detail)
    else:
        goals.append(
            {
                "goal": f"≥ {GOAL_RATIO:.0f}× faster than LangChain warm at {GOAL_SIZE:,} messages",
                "met": None,
                "detail": f"not measured in {mode} mode (sizes {', '.join(map(str, sizes))})",
            }
        )
    for system in systems:
        series = data.get(system, {})
        small, large = str(sizes[0]), str(sizes[-1])
        if small in series and large in series:
            flat = _report.ratio_stats(
                [_median(r["warm"]) for r in raw[system][sizes[-1]]],
                [_median(r["warm"]) for r in raw[system][sizes[0]]],
            )
            detail = (
                f"{system}: warm at {sizes[-1]:,} / warm at {sizes[0]:,} messages = "
                f"{_report.fmt_ratio(flat)}"
            )
            headline.append(detail)
            data[system]["flatness"] = flat
            if system == "ours":
                goals.append(
                    {
                        "goal": "flat as history grows (warm at largest ≤ "
                        f"{FLAT_LIMIT:.0f}× warm at smallest)",
                        "met": flat["median"] <= FLAT_LIMIT,
                        "detail": detail,
                    }
                )
    for peer in peers:
        largest = max((n for n in sizes if str(n) in data.get(peer, {})), default=None)
        if largest is None:
            continue
        entry = data[peer][str(largest)]
        ours = data["ours"][str(largest)]
        if not (peer == "LangChain" and largest == goal_n):
            headline.append(
                f"{peer}/ours warm at {largest:,} messages: "
                f"{_report.fmt_ratio(entry['warm_ratio_vs_ours'])} ({peer} "
                f"{_report.fmt_time(entry['warm']['median'])}, ours "
                f"{_report.fmt_time(ours['warm']['median'])} per round)"
            )
        headline.append(
            f"{peer}/ours cold (first round) at {largest:,} messages: "
            f"{_report.fmt_ratio(entry['cold_ratio_vs_ours'])} — our cold round compacts the "
            f"whole history ({_report.fmt_time(ours['cold']['median'])})"
        )
    notes = [
        f"{p} was not run again at or beyond {n:,} messages: a repeat took over {cap:.0f} s"
        for p, n in skipped.items()
    ]
    if "ours, no compaction" not in systems:
        notes.append(
            "the default stack has no Compaction layer in this checkout, so the "
            "no-compaction variant was not run"
        )
    charts = []
    for phase in ("warm", "cold"):
        charts.append(
            {
                "file": f"overhead_{phase}.png",
                "title": f"Preparation time per round ({phase}) vs history length",
                "x_label": "history length (messages)",
                "y_label": "seconds per round (median)",
                "xlog": True,
                "ylog": True,
                "series": {
                    system: [
                        [n, data[system][str(n)][phase]["median"]]
                        for n in sizes
                        if str(n) in data.get(system, {})
                    ]
                    for system in every
                },
            }
        )
    return {
        "title": "Per-round preparation overhead",
        "mode": mode,
        "workload": workload
        + " (histories cut from it at each size, ending where a request is due)",
        "measured": (
            "ours: from a timing middleware outside the whole default stack to the manifest "
            "observer (every middleware, compaction's summariser calls answered at once by the "
            "scripted model, and the manifest; not the model call or tools). LangChain: "
            "SummarizationMiddleware.before_model (trigger never reached) + "
            "ContextEditingMiddleware(ClearToolUsesEdit()).wrap_model_call with a canned "
            "handler. litellm: trim_messages(max_tokens=our input limit). Cold = first round on "
            "the history; warm = each next round after one tool call and result were appended."
        ),
        "headline": headline,
        "goals": goals,
        "tables": [
            {
                "title": "Time per round (median, p10–p90)",
                "columns": [
                    "messages",
                    "system",
                    "cold",
                    "warm",
                    "warm/cold",
                    "sent cold",
                    "sent warm",
                ],
                "rows": time_rows,
                "note": "'sent' is the number of history messages the prepared request "
                "carried (ours compacts on the cold round, so warm rounds send the compacted "
                "history).",
            },
            {
                "title": "Peer time / our time (paired per repeat; >1 means we are faster)",
                "columns": ["messages", "system", "cold ratio", "warm ratio"],
                "rows": ratio_rows,
            },
        ],
        "charts": charts,
        "notes": notes,
        "data": data,
    }
