"""The first and second call over a long history, in a fresh process and a warm one.

Where a user first feels the library: a stateless caller (or the proxy meeting an existing
conversation, or an agent resuming a long session) hands over 2,000 or 10,000 messages at
once. Each system gets the same history (real SWE-agent runs replayed back to back when
``../shared`` is present, generated runs otherwise — the output says which) with the user
message that starts the call, and the same window (gpt-4o, 128,000 tokens):

- **ours, drop-in** — ``harness.acompletion("openai/gpt-4o", messages, api_base=…)``, stateless,
  against a local OpenAI-compatible server (``tests/integration/openai_server.py``, reached
  through litellm and HTTP) that answers at once without counting (`QuickServer`); the whole
  call is timed, its summary requests and the model call included (local HTTP round trips,
  a few ms each). The second call sends the history again, plus the first answer, a tool call,
  its result and a new user message.
- **ours, proxy hook** — `harness.adapters.completion.prepare_messages`, the path the litellm
  proxy's pre-call hook runs, with a `providers.scripted.ScriptedModel` for summaries; timed
  whole. Second call as for the drop-in.
- **ours, agent** — a `HarnessAgent` with the default stack on the ``ScriptedModel``, the
  history put into its session state, then ``agent.call``; timed is the round's preparation
  (`benchmarks.peers.PrepClock`: from a timing middleware outside the stack to the manifest,
  its summary requests included), not the commit that follows — that first commit stores
  the whole history new to the store (redacted), which a session resumed from its store has
  done before. Its second call is the session's next one.
- **LangChain** — v1 ``SummarizationMiddleware(trigger=[("tokens", input limit), ("messages",
  50)], keep=("messages", 20))`` — our default trigger: 50 messages or the history over the
  budget — then ``ContextEditingMiddleware(ClearToolUsesEdit())``, the two hooks its agent
  runs before a model call (`benchmarks.peers.LangChainPeer`), the summariser answering at
  once. Its second call runs the hooks again on its state plus the same four messages.
- **litellm** — ``trim_messages(messages, model="gpt-4o", max_tokens=input limit)``; second call
  on the grown list.

*Fresh process*: each measurement runs in a new interpreter that has imported everything it
needs (the import itself is the ``incremental`` benchmark's) but has counted nothing and
loaded no tokenizer. *Warm process*: this process, after every system ran once on a short
history; the count caches are cleared before each measurement (the history is new to it),
the tokenizers stay loaded. Repeats are interleaved across systems; every ratio is LangChain's
time over ours in the same repeat (paired), median and p10–p90.

Run alone: ``python -m benchmarks cold [--quick | --smoke]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.peers import LangChainPeer, to_langchain, to_openai, trim_messages
from benchmarks.workloads import FIXED_SUMMARY, Session, history, tool_results
from harness.messages import Message

MODEL = "gpt-4o"
WINDOW = 128_000
TRIGGER_MESSAGES = 50
KEEP_MESSAGES = 20
CALL_INPUT = "Continue with the task."
NEXT_INPUT = "Now run the tests again."
SIZES = {"full": (2_000, 10_000), "quick": (2_000, 10_000), "smoke": (120,)}
REPEATS = {"full": 5, "quick": 2, "smoke": 1}
FRESH_REPEATS = {"full": 3, "quick": 1, "smoke": 1}
GOAL_RATIO = 3.0
"""Goal: our first call over 10,000 messages takes at most this many times LangChain's."""
GOAL_SIZE = 10_000
PEER_CAP_S = {"full": 60.0, "quick": 10.0, "smoke": 5.0}
"""A peer whose two calls took longer than this is not run again (litellm: 28 s at 2,000)."""
OURS = ("ours, drop-in", "ours, proxy hook", "ours, agent")
SYSTEMS = (*OURS, "LangChain", "litellm")
FIXED_REPLY = "ok"


# ----------------------------------------------------------------------------- server
def quick_server() -> Any:
    """Start the local OpenAI-compatible test server, answering at once without counting."""
    from tests.integration import openai_server as srv

    class QuickServer(srv.OpenAIServer):
        """The test server minus its tiktoken count of every prompt (the server's cost)."""

        def answer(self, body: dict[str, Any]) -> Any:
            return srv.Reply(text=FIXED_SUMMARY, completion_tokens=300)

        def usage(self, body: Any, behaviour: Any) -> dict[str, Any]:
            return {"prompt_tokens": 1, "completion_tokens": 300, "total_tokens": 301}

    return QuickServer().start()


# ---------------------------------------------------------------------------- inputs
def _second_turn(session: Session) -> list[Message]:
    """What a caller appends before its second call: the answer, a tool round, a new ask."""
    outputs = tool_results(session) or [Message.tool("x", "ok")]
    call = Message.assistant(None, tool_calls=[_call("cold_second")])
    return [
        Message.assistant(FIXED_REPLY),
        call,
        Message.tool("cold_second", outputs[len(outputs) // 2].text, name="bash"),
        Message.user(NEXT_INPUT),
    ]


def _call(call_id: str) -> Any:
    from harness.messages import ToolCall

    return ToolCall(id=call_id, name="bash", arguments='{"command": "pytest -q"}')


def input_limit() -> int:
    """Return our input limit for `MODEL` under the default policy (LangChain's token trigger)."""
    from harness.policy import ContextPolicy

    return ContextPolicy().input_limit(WINDOW)


# ---------------------------------------------------------------------------- systems
async def run_dropin(session: Session, base_url: str) -> tuple[float, float]:
    """Time two stateless ``acompletion`` calls (fresh dicts each time, as JSON decodes them)."""
    from harness import acompletion
    from harness.adapters.prefix_cache import PrefixCache

    cache = PrefixCache()  # the history is new to the process: nothing cached from a repeat
    first = to_openai((*session.messages, Message.user(CALL_INPUT)), session.system_prompt)
    second = [*first, *(m.to_openai() for m in _second_turn(session))]
    first, second = json.loads(json.dumps(first)), json.loads(json.dumps(second))
    times = []
    for messages in (first, second):
        started = time.perf_counter()
        await acompletion(
            f"openai/{MODEL}",
            messages,
            api_base=base_url,
            api_key="sk-local",
            timeout=60,
            prefix_cache=cache,
        )
        times.append(time.perf_counter() - started)
    return times[0], times[1]


async def run_proxy(session: Session) -> tuple[float, float]:
    """Time two calls of the proxy hook's preparation (`prepare_messages`), stateless."""
    from harness.adapters.completion import prepare_messages
    from harness.adapters.prefix_cache import PrefixCache

    model = _scripted()
    cache = PrefixCache()  # the history is new to the process: nothing cached from a repeat
    first = to_openai((*session.messages, Message.user(CALL_INPUT)), session.system_prompt)
    second = [*first, *(m.to_openai() for m in _second_turn(session))]
    first, second = json.loads(json.dumps(first)), json.loads(json.dumps(second))
    times = []
    for messages in (first, second):
        started = time.perf_counter()
        await prepare_messages(MODEL, messages, client=model, prefix_cache=cache)
        times.append(time.perf_counter() - started)
    return times[0], times[1]


def _scripted() -> Any:
    from harness.tokens import approximate
    from providers.scripted import ScriptedModel

    return ScriptedModel(
        model=MODEL,
        window=WINDOW,
        default=FIXED_REPLY,
        summary=FIXED_SUMMARY,
        estimator=approximate(),
    )


async def run_agent(session: Session, workdir: str) -> tuple[float, float]:
    """Time a fresh agent's first call on the history, then the session's next call."""
    from benchmarks.peers import PrepClock, our_stack
    from harness.agent.loop import HarnessAgent, RuntimeContext
    from harness.policy import ContextPolicy

    clock = PrepClock()
    agent = HarnessAgent(
        model=_scripted(),
        system_prompt=session.system_prompt,
        stack=[clock, *our_stack()],
        policy=ContextPolicy(observer=clock.observe),
        workspace=workdir,
    )
    ctx = RuntimeContext(user_id="bench", session_id="cold")
    agent.state(ctx).append(*session.messages)
    for text in (CALL_INPUT, NEXT_INPUT):
        await agent.call(text, ctx)
    return clock.samples[0], clock.samples[1]


def run_langchain(session: Session) -> tuple[float, float]:
    """Time LangChain's two hooks on the history, then on its state plus the second turn."""
    peer = LangChainPeer(
        session.system_prompt,
        trigger=[("tokens", input_limit()), ("messages", TRIGGER_MESSAGES)],
        keep=("messages", KEEP_MESSAGES),
    )
    messages = to_langchain((*session.messages, Message.user(CALL_INPUT)))
    started = time.perf_counter()
    peer.round(messages)
    first = time.perf_counter() - started
    messages.extend(to_langchain(_second_turn(session)))
    started = time.perf_counter()
    peer.round(messages)
    return first, time.perf_counter() - started


def run_litellm(session: Session) -> tuple[float, float]:
    """Time ``trim_messages`` to our input limit on the history, then on the grown list."""
    trim = trim_messages()
    limit = input_limit()
    dicts = to_openai((*session.messages, Message.user(CALL_INPUT)), session.system_prompt)
    started = time.perf_counter()
    trim(dicts, model=MODEL, max_tokens=limit)
    first = time.perf_counter() - started
    dicts.extend(m.to_openai() for m in _second_turn(session))
    started = time.perf_counter()
    trim(dicts, model=MODEL, max_tokens=limit)
    return first, time.perf_counter() - started


async def run_system(system: str, session: Session, base_url: str) -> tuple[float, float]:
    """Run one system's two calls on ``session``; return their seconds."""
    import tempfile

    gc.collect()
    if system == "ours, drop-in":
        return await run_dropin(session, base_url)
    if system == "ours, proxy hook":
        return await run_proxy(session)
    if system == "ours, agent":
        with tempfile.TemporaryDirectory(prefix="bench-cold-") as folder:
            return await run_agent(session, folder)
    if system == "LangChain":
        return run_langchain(session)
    return run_litellm(session)


def _imports(system: str) -> None:
    """Import what ``system`` needs, as an application that uses it has at start."""
    if system in OURS:
        import harness  # noqa: F401
        import middleware  # noqa: F401
        from providers.litellm_client import load_litellm

        load_litellm()
    elif system == "LangChain":
        LangChainPeer("", trigger=("messages", TRIGGER_MESSAGES), keep=("messages", 20))
    else:
        trim_messages()


# ----------------------------------------------------------------------- fresh process
def fresh(system: str, n: int) -> tuple[float, float]:
    """Run ``system`` on ``n`` messages in a new interpreter; return its two calls' seconds."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_cold", "--child", system, str(n)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(f"fresh {system} at {n:,} failed: {out.stderr[-2000:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return float(data["first"]), float(data["second"])


def _child(system: str, n: int) -> None:
    import anyio

    session = history(n)
    _imports(system)
    server = quick_server() if system == "ours, drop-in" else None
    try:
        first, second = anyio.run(run_system, system, session, server.base_url if server else "")
    finally:
        if server is not None:
            server.stop()
    print(json.dumps({"first": first, "second": second}))  # the parent reads it


# --------------------------------------------------------------------------- measure
Samples = dict[str, dict[str, dict[int, dict[str, list[float]]]]]
"""process kind → system → size → {"first": [...], "second": [...]}."""


async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Measure every system's first and second call, fresh and warm, at every size."""
    from harness.tokens import clear_count_caches

    sizes = SIZES[mode]
    samples: Samples = {"fresh": {s: {} for s in SYSTEMS}, "warm": {s: {} for s in SYSTEMS}}
    for system in SYSTEMS:
        _imports(system)
    server = quick_server()
    workload = ""
    skipped: dict[str, int] = {}
    try:
        short = history(60)
        for system in SYSTEMS:  # the warm process: every system ran once before
            await run_system(system, short, server.base_url)
        steps = len(sizes) * len(SYSTEMS) * (REPEATS[mode] + FRESH_REPEATS[mode])
        bar = _report.ProgressBar(progress, "calls timed", steps)
        for n in sizes:
            session = history(n)
            workload = session.label
            progress(f"history of {len(session.messages):,} messages ({session.chars:,} chars)")
            for kind, repeats in (("fresh", FRESH_REPEATS[mode]), ("warm", REPEATS[mode])):
                for _ in range(repeats):
                    for system in SYSTEMS:
                        if system in skipped:
                            bar.step(f"{kind} {system} n={n:,}: skipped")
                            continue
                        if kind == "fresh":
                            first, second = fresh(system, n)
                        else:
                            clear_count_caches()
                            first, second = await run_system(system, session, server.base_url)
                        _add(samples[kind], system, n, first, second)
                        if system not in OURS and first + second > PEER_CAP_S[mode]:
                            skipped[system] = n
                        bar.step(f"{kind} {system} n={n:,}: first {_report.fmt_time(first)}")
    finally:
        server.stop()
    result = _result(mode, sizes, samples, workload)
    result["notes"].extend(
        f"{s} was not run again after a measurement at {n:,} messages took over "
        f"{PEER_CAP_S[mode]:.0f} s"
        for s, n in skipped.items()
    )
    return result


def _add(
    block: dict[str, dict[int, dict[str, list[float]]]], system: str, n: int, *t: float
) -> None:
    entry = block[system].setdefault(n, {"first": [], "second": []})
    entry["first"].append(t[0])
    entry["second"].append(t[1])


def _result(mode: Mode, sizes: Sequence[int], samples: Samples, workload: str) -> dict[str, Any]:
    rows: list[list[Any]] = []
    data: dict[str, Any] = {}
    goals: list[dict[str, Any]] = []
    headline: list[str] = []
    for kind, by_system in samples.items():
        for n in sizes:
            lc = by_system["LangChain"].get(n)
            for system in SYSTEMS:
                entry = by_system[system].get(n)
                if entry is None:
                    continue
                cell: dict[str, Any] = {
                    "first": _report.stats(entry["first"]),
                    "second": _report.stats(entry["second"]),
                }
                if lc is not None and system in OURS:
                    cell["first_ours_over_langchain"] = _report.ratio_stats(
                        entry["first"], lc["first"]
                    )
                    cell["second_ours_over_langchain"] = _report.ratio_stats(
                        entry["second"], lc["second"]
                    )
                data.setdefault(kind, {}).setdefault(system, {})[str(n)] = cell
                rows.append(
                    [
                        kind,
                        n,
                        system,
                        _report.fmt_stats_time(cell["first"]),
                        _report.fmt_stats_time(cell["second"]),
                        _report.fmt_ratio(cell.get("first_ours_over_langchain")),
                        _report.fmt_ratio(cell.get("second_ours_over_langchain")),
                    ]
                )
        if GOAL_SIZE in sizes:
            ratios = {s: data[kind][s][str(GOAL_SIZE)]["first_ours_over_langchain"] for s in OURS}
            detail = "; ".join(f"{s} {_report.fmt_ratio(r)}" for s, r in ratios.items())
            goals.append(
                {
                    "goal": f"{kind} process: our first call over {GOAL_SIZE:,} messages ≤ "
                    f"{GOAL_RATIO:.0f}× LangChain's (ours ÷ LangChain)",
                    "met": all(r["median"] <= GOAL_RATIO for r in ratios.values()),
                    "detail": detail,
                }
            )
            headline.append(
                f"{kind} process, first call at {GOAL_SIZE:,}: ours ÷ LangChain = {detail}"
            )
        else:
            goals.append(
                {
                    "goal": f"{kind} process: our first call over {GOAL_SIZE:,} messages ≤ "
                    f"{GOAL_RATIO:.0f}× LangChain's",
                    "met": None,
                    "detail": f"not measured in {mode} mode",
                }
            )
    return {
        "title": "The first and second call over a long history, fresh and warm process",
        "mode": mode,
        "workload": workload + " (cut at each size, ending where a request is due)",
        "measured": (
            f"window {WINDOW:,} ({MODEL}); ours: the default stack and policy through "
            "acompletion (local HTTP server answering at once), prepare_messages (the proxy "
            "hook's path) and HarnessAgent; LangChain: SummarizationMiddleware(trigger=[('tokens', "
            f"{input_limit():,}), ('messages', {TRIGGER_MESSAGES})], keep=('messages', "
            f"{KEEP_MESSAGES})) + ContextEditingMiddleware(ClearToolUsesEdit()); litellm: "
            f"trim_messages(max_tokens={input_limit():,}). Summarisers answer at once with a "
            "fixed text. Fresh: a new interpreter per measurement, imports done before timing; "
            "warm: this process, count caches cleared before each measurement."
        ),
        "headline": headline,
        "goals": goals,
        "tables": [
            {
                "title": "First and second call (median, p10–p90) and ours ÷ LangChain (paired)",
                "columns": [
                    "process",
                    "messages",
                    "system",
                    "first",
                    "second",
                    "first ÷ LC",
                    "second ÷ LC",
                ],
                "rows": rows,
                "note": "ratio < 1: ours is faster. Fresh-process figures pair the repeats "
                "in the order they ran.",
            }
        ],
        "notes": [
            "LangChain's summariser sees at most trim_tokens_to_summarize (4,000) tokens of "
            "the early part; ours summarises all of it (in place, several requests at 10,000 "
            "messages), so the first call does more work on our side.",
            "the drop-in figures include local HTTP round trips to the test server (the "
            "summary requests and the model call); the others call no server.",
        ],
        "data": data,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="bench_cold child process")
    parser.add_argument("--child", nargs=2, metavar=("SYSTEM", "N"), required=True)
    args = parser.parse_args()
    _child(args.child[0], int(args.child[1]))
