"""Fidelity: what each context strategy costs, and whether what the agent needs next is still sent.

A session of agent runs (the SWE-agent trajectories in ``../shared/data`` back to back, each
run once per copy with fresh ids; without them the generated runs of
`benchmarks.generators` with planted facts, `benchmarks.referents.plant_facts`) is replayed
round by round at windows of 8k, 16k and 32k tokens through every strategy:

- **ours** (``middleware.default_stack()``) and our stack with each Compaction alternative
  (`VARIANTS`), in a real `HarnessAgent` on a ``ScriptedModel`` that rejects a request over
  the window (so ``OverflowRetry`` handles it, and both tries count);
- **LangChain** v1 ``SummarizationMiddleware`` + ``ContextEditingMiddleware`` and
  **ContextEditing alone** (`benchmarks.peers.LangChainPeer`, as in ``tokens_sent``);
- **masking M=5 / M=10** (`benchmarks.peers.mask_observations`, SWE-agent's last-M
  observations);
- **litellm** ``trim_messages`` to the input limit;
- **none**: the whole history every request (it overflows once the session outgrows the window).

Every summariser returns the same fixed text (`benchmarks.workloads.FIXED_SUMMARY`), so a
summary carries none of the facts it replaced: availability then measures what each
strategy keeps *verbatim*, which is a floor for a real model's summary.

Per request: exact o200k input tokens (what was sent, plus the same tool schemas for every
system), over the window or not, tool pairs intact, tokens equal to a recent request's prefix
(`benchmarks.bench_tokens_sent.PrefixMeter`), the billed input with published cache prices
(`benchmarks.bench_tokens_sent.bill`), and availability (`benchmarks.referents`): of the
referents the recorded next action uses that its run showed before, the share present in
the request — overall and for those last seen far back.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._report import Mode, Progress
from benchmarks.bench_tokens_sent import (
    RESERVE,
    Counter,
    PrefixMeter,
    bill,
    pair_problems,
    prices,
)
from benchmarks.fidelity_model import (
    POINTS,
    ModelSummaries,
    SummaryCache,
    asked_at,
    langchain_summarizer,
    questions,
    recall_asker,
)
from benchmarks.peers import (
    LangChainPeer,
    from_langchain,
    mask_observations,
    our_stack,
    to_langchain,
    trim_messages,
)
from benchmarks.referents import FAR_TOKENS, Need, availability, needs, plant_facts, request_text
from benchmarks.trajectories import SHARED
from benchmarks.workloads import (
    BRIDGE,
    FIXED_SUMMARY,
    ReplayClient,
    Session,
    Source,
    base_trajectories,
    fresh_copy,
    loop_ready,
    replay,
    replay_tools,
    request_points,
    request_ready,
    stack_tool_names,
)
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.messages import Message
from harness.request import ModelRequest, ModelResponse
from harness.tokens import estimator_for
from harness.types import ModelClient
from providers.scripted import ScriptedModel

WINDOWS: dict[str, tuple[int, ...]] = {
    "full": (8_192, 16_384, 32_768),
    "quick": (8_192, 16_384, 32_768),
    "smoke": (8_192,),
}
COPIES = {"full": 1, "quick": 1, "smoke": 1}
"""How many times the runs are replayed back to back."""
LITELLM_WINDOWS: dict[str, tuple[int, ...]] = {
    "full": (8_192, 16_384, 32_768),
    "quick": (8_192,),
    "smoke": (),
}
"""The windows litellm's ``trim_messages`` runs at (its cost grows with the square of the kept
messages: 2 min at 16k, 5 min at 32k over the session)."""
SMOKE_MESSAGES = 70
KEEP_FRACTION = 0.35
PRICE_KEYS = {
    "OpenAI gpt-4o": "usd_openai",
    "Anthropic Sonnet 4.5": "usd_anthropic",
    "OpenAI gpt-5": "usd_openai_gpt5",
}
"""The bills the frontier is drawn with (the first in the charts)."""


def variants() -> dict[str, Callable[[], Any]]:
    """Return our stack's alternatives: name → a function building its ``Compaction``."""
    from middleware import Compaction

    return {
        "ours": lambda: True,
    } | {name: (lambda kw=kw: Compaction(**kw)) for name, kw in ALTERNATIVES.items()}


ALTERNATIVES: dict[str, dict[str, Any]] = {
    "ours + masking M=10": {"mask_observations": 10},
    "ours + masking M=5": {"mask_observations": 5},
    "ours + superseded reads": {"supersede_reads": True},
    "ours + masking M=10 + superseded": {"mask_observations": 10, "supersede_reads": True},
    "ours + files kept in summary": {"summary_keeps_files": True},
    "ours + masking M=10 + files": {"mask_observations": 10, "summary_keeps_files": True},
}
"""Compaction settings of each alternative we measure (the rest at their defaults)."""


# ------------------------------------------------------------------------------ session
@dataclass(frozen=True)
class Workload:
    """The replayed session, which run each message belongs to, and what each action needs."""

    session: Session
    runs: tuple[int, ...]
    planted: bool


SHARED_DIR: Path = SHARED
"""Where the shared data is looked for (the folder next to the project root)."""


def workload(mode: Mode, *, source: Source = "auto", shared: Path | None = None) -> Workload:
    """Return the session of this mode: real runs when present, else planted generated ones."""
    kind, base = base_trajectories(source, shared=shared or SHARED_DIR)
    messages: list[Message] = []
    runs: list[int] = []
    copies = COPIES[mode]
    for copy in range(copies):
        for index, run in enumerate(base):
            one = loop_ready(run.messages)
            if kind == "synthetic":
                one = plant_facts(one, run=index)
            one = fresh_copy(one, copy * 1000 + index)
            if messages and messages[-1].role == "tool" and one and one[0].role == "user":
                messages.append(Message.assistant(BRIDGE, id=f"seam{copy}-{index}"))
                runs.append(runs[-1])
            messages.extend(one)
            runs.extend([copy * len(base) + index] * len(one))
    if mode == "smoke":
        messages = list(request_ready(messages, SMOKE_MESSAGES))
    name = "swe-agent-trajectories" if kind == "real" else "synthetic"
    what = (
        f"{len(base)} SWE-agent runs"
        if kind == "real"
        else f"{len(base)} generated runs (seed 0) with planted facts (a file, a hash and a "
        "number in every third tool output, quoted by a tool call two calls later)"
    )
    description = f"{what} back to back ×{copies}, fresh message and tool-call ids per run" + (
        f", the first {len(messages)} messages" if mode == "smoke" else ""
    )
    session = Session(name, kind, description, base[0].system, tuple(messages), copies)
    return Workload(session, tuple(runs[: len(messages)]), kind == "synthetic")


# ------------------------------------------------------------------------------- traces
@dataclass
class Sent:
    """One request a strategy sent: agent or summary, its request point, the messages."""

    kind: str
    point: int | None
    messages: list[Message]
    tools: bool = True


@dataclass
class Trace:
    """Everything one strategy sent at one window, in order."""

    name: str
    sent: list[Sent] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PointClient(ReplayClient):
    """A `ReplayClient` that notes which recorded reply each agent request was sent for."""

    points: dict[int, int] = field(default_factory=dict)
    """``id(request)`` → the index of the recorded reply (the request point)."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Note the request point, then send as `ReplayClient` does."""
        if request.ids.purpose == "agent" and request.state is not None:
            self.points[id(request)] = self.position
        return await super().complete(request)


@dataclass
class RealModel:
    """The model that writes every summary when ``--model`` is given, and its answer cache."""

    model: str
    api_base: str | None
    client: ModelClient
    cache: SummaryCache
    progress: Progress


async def run_ours(
    name: str, compaction: Any, session: Session, window: int, real: RealModel | None = None
) -> tuple[Trace, int]:
    """Replay ``session`` through our stack; return its trace and the tool-schema tokens."""
    exact = estimator_for("gpt-4o", exact=True)
    inner = ScriptedModel(
        model="gpt-4o",
        window=window,
        overflow_above=window,
        summary=FIXED_SUMMARY,
        estimator=exact,
        default="(unused)",
    )
    target: ModelClient = (
        inner if real is None else ModelSummaries(inner, real.client, real.cache, real.progress)
    )
    client = PointClient(target, session.messages)
    stack = our_stack(compaction=compaction)
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as folder:
        agent = HarnessAgent(
            model=client,
            system_prompt=session.system_prompt,
            tools=replay_tools(session.messages, skip=stack_tool_names(stack)),
            stack=stack,
            workspace=folder,
            max_rounds=100_000,
        )
        tool_tokens = exact.count_tools(t.schema for t in agent.tools.values())
        outcome = await replay(
            agent, session, RuntimeContext(user_id="bench", session_id=name), client
        )
    trace = Trace(name)
    kinds: dict[str, int] = {}
    for request in inner.requests:
        summary = request.ids.purpose == "summary"
        trace.sent.append(
            Sent(
                "summary" if summary else "agent",
                None if summary else client.points.get(id(request)),
                request.render(),
                bool(request.tools),
            )
        )
        for t in request.transforms:
            kind = str(t).split(":", 1)[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    trace.extra = {"failures": outcome.failures, "transforms": kinds}
    return trace, tool_tokens


def run_langchain(
    session: Session,
    window: int,
    counter: Counter,
    *,
    summarise: bool,
    real: RealModel | None = None,
) -> Trace:
    """LangChain's summarisation + context editing (``summarise``) or context editing alone."""
    limit = window - RESERVE
    name = "LangChain" if summarise else "ContextEditing alone"
    trace = Trace(name)
    ask = (
        langchain_summarizer(real.model, real.api_base, real.cache, real.progress)
        if real is not None
        else None
    )

    def summarize(messages: list[Any]) -> str:
        prompt = peer.summary_prompt(messages)
        trace.sent.append(Sent("summary", None, [Message.user(prompt)], False))
        return ask(prompt) if ask is not None else FIXED_SUMMARY

    peer = LangChainPeer(
        session.system_prompt,
        trigger=[("messages", 50), ("tokens", limit - counter.tool_tokens)]
        if summarise
        else ("messages", 10**9),
        keep=("tokens", int(KEEP_FRACTION * limit)),
        summarizer=summarize,
    )
    system = Message.system(session.system_prompt)
    originals = {m.id: m for m in session.messages}
    state: list[Any] = []
    cursor = 0
    for point in request_points(session.messages):
        state.extend(to_langchain(session.messages[cursor:point]))
        cursor = point
        trace.sent.append(
            Sent("agent", point, [system, *from_langchain(peer.round(state), originals)])
        )
    return trace


def run_litellm(session: Session, window: int, counter: Counter) -> Trace:
    """``litellm.utils.trim_messages`` to the input limit before every request (stateless)."""
    trim = trim_messages()
    limit = window - RESERVE - counter.tool_tokens
    by_key = {_key(m.to_openai()): m for m in session.messages}
    system = {"role": "system", "content": session.system_prompt}
    system_message = Message.system(session.system_prompt)
    dicts = [m.to_openai() for m in session.messages]
    sizes = [counter.estimator.count_message(m) for m in session.messages]
    trace = Trace("litellm trim_messages")
    for point in request_points(session.messages):
        start, held = point, 0
        while start > 0 and held < 2 * limit:  # a suffix twice the limit: same output, faster
            start -= 1
            held += sizes[start]
        kept = trim([system, *dicts[start:point]], model="gpt-4o", max_tokens=limit)
        sent = [
            by_key.get(_key(d)) or Message.from_openai(d) for d in kept if d.get("role") != "system"
        ]
        trace.sent.append(Sent("agent", point, [system_message, *sent]))
    return trace


def _key(data: dict[str, Any]) -> tuple[Any, ...]:
    calls = tuple((c["id"], c["function"]["arguments"]) for c in data.get("tool_calls") or ())
    return (data.get("role"), str(data.get("content")), data.get("tool_call_id"), calls)


def run_masking(load: Workload, keep: int) -> Trace:
    """SWE-agent's observation masking: the last ``keep`` observations verbatim, older ones a line.

    Observations are tool results and, in the runs without function calling, every user
    message of a run but its first (the task).
    """
    session = load.session
    observations = frozenset(
        m.id
        for i, m in enumerate(session.messages)
        if m.role == "user" and i > 0 and load.runs[i - 1] == load.runs[i]
    )
    system = Message.system(session.system_prompt)
    trace = Trace(f"masking M={keep}")
    for point in request_points(session.messages):
        masked = mask_observations(session.messages[:point], keep, observations)
        trace.sent.append(Sent("agent", point, [system, *masked]))
    return trace


def run_none(session: Session) -> Trace:
    """The whole history every request."""
    system = Message.system(session.system_prompt)
    trace = Trace("none (full history)")
    for point in request_points(session.messages):
        trace.sent.append(Sent("agent", point, [system, *session.messages[:point]]))
    return trace


# ------------------------------------------------------------------------------ scoring
def score(trace: Trace, window: int, counter: Counter, wanted: dict[int, Need]) -> dict[str, Any]:
    """Return one strategy's tally at one window: tokens, overflows, pairs, bill, availability."""
    meter = PrefixMeter(counter.tool_tokens)
    over = broken = 0
    last: dict[int, list[Message]] = {}
    for sent in trace.sent:
        tokens = counter.request(sent.messages, tools=sent.tools)
        meter.add(sent.messages, tokens, kind=sent.kind, tools=sent.tools)
        if sent.kind != "agent":
            continue
        over += tokens > window
        broken += pair_problems([m for m in sent.messages if m.role != "system"]) > 0
        if sent.point is not None:
            # A retried round: the try that went through. A request over the window is
            # rejected by the provider: nothing of it reaches the model.
            last[sent.point] = sent.messages if tokens <= window else []
    found = total = far_found = far_total = 0
    per_point: list[list[int]] = []
    for point, need in sorted(wanted.items()):
        messages = last.get(point)
        text = request_text(messages) if messages is not None else ""
        f, t, ff, ft = availability(need, text)
        found, total, far_found, far_total = found + f, total + t, far_found + ff, far_total + ft
        per_point.append([point, f, t, ff, ft])
    agent_tokens, prefix, _ = meter.of("agent")
    summary_tokens = meter.of("summary")[0]
    return {
        "system": trace.name,
        "window": window,
        "requests": len(agent_tokens),
        "summary_requests": len(summary_tokens),
        "agent_tokens": sum(agent_tokens),
        "summary_tokens": sum(summary_tokens),
        "max_tokens": max(agent_tokens, default=0),
        "overflows": over,
        "invalid_pairs": broken,
        "prefix_tokens": sum(prefix),
        "availability": found / total if total else float("nan"),
        "far_availability": far_found / far_total if far_total else float("nan"),
        "referents": total,
        "far_referents": far_total,
        "per_request_tokens": agent_tokens,
        "per_request_prefix": prefix,
        "per_point_availability": per_point,
        **{k: v for k, v in bill(meter, prices()).items() if k.startswith("usd_")},
        **trace.extra,
    }


def dominated(s: dict[str, Any], others: Sequence[dict[str, Any]], key: str) -> list[str]:
    """Return the strategies with both a lower bill (``key``) and a higher availability than ``s``."""
    return [
        o["system"]
        for o in others
        if o is not s and o[key] < s[key] and o["availability"] > s["availability"]
    ]


# ------------------------------------------------------------------------------- driver
async def measure(
    mode: Mode, progress: Progress, *, model: str | None = None, api_base: str | None = None
) -> dict[str, Any]:
    """Replay each session through every strategy at every window and score each.

    With the real runs present, the generated runs with planted facts are replayed too
    (not in smoke mode): most real runs send observations as user messages, the generated
    ones as tool results, which is where masking and superseded reads act. With ``model``,
    every summary is written by that model (`benchmarks.fidelity_model`; kept on disk, so
    a run that stopped resumes).
    """
    real = None
    if model:
        from providers.litellm_client import LiteLLMClient

        real = RealModel(
            model, api_base, LiteLLMClient(model, api_base=api_base), SummaryCache(model), progress
        )
    loads = [workload(mode)]
    if loads[0].session.source == "real" and mode != "smoke":
        loads.append(workload(mode, source="synthetic"))
    notes: list[str] = []
    parts = []
    for load in loads:
        tallies, wanted = await _measure_one(load, mode, progress, notes, real)
        parts.append((load, wanted, tallies))
    if real is not None:
        notes.append(
            f"summaries written by {model}"
            + (f" at {api_base}" if api_base else "")
            + f": {real.cache.asked} asked in this run, {len(real.cache.answers)} kept in "
            f"{real.cache.path} (a rerun reuses them); fact questions and recall are not "
            "built yet"
        )
    return _result(mode, parts, notes, summaries=model)


async def _measure_one(
    load: Workload,
    mode: Mode,
    progress: Progress,
    notes: list[str],
    real: RealModel | None = None,
) -> tuple[list[dict[str, Any]], dict[int, Need]]:
    session = load.session
    progress(f"session: {session.label}")
    exact = estimator_for("gpt-4o", exact=True)
    points = request_points(session.messages)
    wanted = needs(
        session.messages, points, load.runs, exact.count_message, system=session.system_prompt
    )
    litellm_windows = LITELLM_WINDOWS[mode] if session.source == "real" else ()
    tallies: list[dict[str, Any]] = []
    for window in WINDOWS[mode]:
        traces: list[Trace] = []
        tool_tokens = 0
        for name, make in variants().items():
            trace, tool_tokens = await run_ours(name, make(), session, window, real)
            traces.append(trace)
            progress(f"{window:,}: {name} replayed ({len(trace.sent)} requests)")
        counter = Counter(tool_tokens)
        try:
            traces.append(run_langchain(session, window, counter, summarise=True, real=real))
            traces.append(run_langchain(session, window, counter, summarise=False))
        except ImportError as exc:
            notes.append(f"LangChain was not run: {exc} (install the bench extra)")
        traces.append(run_masking(load, 5))
        traces.append(run_masking(load, 10))
        if window in litellm_windows:
            traces.append(run_litellm(session, window, counter))
        elif window == WINDOWS[mode][-1]:
            notes.append(
                f"{session.name}: litellm trim_messages ran at "
                + (", ".join(f"{w:,}" for w in litellm_windows) or "no window")
                + f" in {mode} mode: its trimming counts the kept messages again for every "
                "message it adds (about 1 s a request at 16k, 2 s at 32k)"
                + ("; the full run has every window of the real session" if mode != "full" else "")
            )
        traces.append(run_none(session))
        scored = [score(trace, window, counter, wanted) for trace in traces]
        if real is not None:
            recall(load, window, traces, scored, counter, real, notes)
        tallies.extend(scored)
        progress(f"{window:,}: scored {len(traces)} strategies")
    return tallies, wanted


def compaction_points(trace: Trace, limit: int = POINTS) -> list[int]:
    """Return the request points right after ``trace``'s summaries (at most ``limit``, spread)."""
    found: list[int] = []
    after_summary = False
    for sent in trace.sent:
        if sent.kind == "summary":
            after_summary = True
        elif after_summary and sent.point is not None:
            if sent.point not in found:
                found.append(sent.point)
            after_summary = False
    if len(found) <= limit:
        return found
    step = len(found) / limit
    return [found[int(i * step)] for i in range(limit)]


def recall(
    load: Workload,
    window: int,
    traces: Sequence[Trace],
    scored: list[dict[str, Any]],
    counter: Counter,
    real: RealModel,
    notes: list[str],
) -> None:
    """Ask the fact questions after the default stack's compactions; add ``recall`` to each tally.

    The same (point, question) pairs for every strategy, and for the full history and no
    history at all (kept under the keys ``full context`` and ``no context``); a request over
    the window answers nothing.
    """
    session = load.session
    pool = questions(session.messages, load.runs)
    ask = recall_asker(real.model, real.api_base, real.cache, real.progress)
    points = compaction_points(traces[0], 2 if len(session.messages) <= SMOKE_MESSAGES else POINTS)
    pairs = [(p, q) for p in points for q in asked_at(p, load.runs, pool)]
    system = Message.system(session.system_prompt)
    for trace, tally in zip(traces, scored, strict=True):
        last: dict[int, list[Message]] = {}
        for sent in trace.sent:
            if sent.kind == "agent" and sent.point is not None:
                fits = counter.request(sent.messages, tools=sent.tools) <= window
                last[sent.point] = sent.messages if fits else []
        right = sum(1 for p, q in pairs if last.get(p) and ask(last[p], q))
        tally["recall"] = right / len(pairs) if pairs else float("nan")
        tally["questions"] = len(pairs)

    def full(point: int) -> list[Message]:
        return [system, *session.messages[:point]]

    def empty(point: int) -> list[Message]:
        return [system]

    baselines: list[tuple[str, Callable[[int], list[Message]]]] = [
        ("full context", full),
        ("no context", empty),
    ]
    for name, context in baselines:
        right = sum(1 for p, q in pairs if ask(context(p), q))
        scored[0].setdefault("recall_baselines", {})[name] = (
            right / len(pairs) if pairs else float("nan")
        )
    if not pairs:
        notes.append(f"{session.name} {window:,}: no fact question was due after a compaction")


def _fmt(x: float) -> str:
    return "–" if x != x else f"{x:.0%}"


def frontier_rows(tallies: Sequence[dict[str, Any]], key: str = "usd_openai") -> list[list[Any]]:
    """Return the frontier table's rows: one per strategy and window."""
    rows = []
    for t in tallies:
        beaten = dominated(t, [o for o in tallies if o["window"] == t["window"]], key)
        rows.append(
            [
                f"{t['window']:,}",
                t["system"],
                t["requests"],
                t["agent_tokens"] + t["summary_tokens"],
                t["max_tokens"],
                t["overflows"],
                t["invalid_pairs"],
                t["prefix_tokens"],
                f"${t['usd_openai']:.3f}",
                f"${t['usd_anthropic']:.3f}",
                f"${t['usd_openai_gpt5']:.3f}",
                _fmt(t["availability"]),
                _fmt(t["far_availability"]),
                "yes" if not beaten else "no (" + ", ".join(beaten) + ")",
                *([_fmt(t["recall"])] if "recall" in t else []),
            ]
        )
    return rows


COLUMNS = [
    "window",
    "strategy",
    "requests",
    "input tokens",
    "max/request",
    "over window",
    "broken pairs",
    "cached prefix",
    "OpenAI gpt-4o",
    "Anthropic",
    "OpenAI gpt-5",
    "available",
    f"far back (> {FAR_TOKENS:,} tokens)",
    "on the frontier (gpt-4o)",
]


def _goals(name: str, tallies: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    ours = [t for t in tallies if t["system"] == "ours"]
    peers = [t for t in tallies if not t["system"].startswith("ours")]
    goals = []
    for provider, key in PRICE_KEYS.items():
        losses = {
            o["window"]: dominated(o, [p for p in peers if p["window"] == o["window"]] + [o], key)
            for o in ours
        }
        goals.append(
            {
                "goal": f"{name}: the default stack is on the frontier ({provider} bill vs "
                "availability): no peer both cheaper and with more available",
                "met": all(not b for b in losses.values()),
                "detail": "; ".join(
                    f"{w:,}: " + (", ".join(b) if b else "none") for w, b in losses.items()
                ),
            }
        )
    goals.append(
        {
            "goal": f"{name}: the default stack sends 0 requests over the window, 0 with broken "
            "pairs",
            "met": all(o["overflows"] == 0 and o["invalid_pairs"] == 0 for o in ours),
            "detail": "; ".join(
                f"{o['window']:,}: {o['overflows']} over, {o['invalid_pairs']} broken" for o in ours
            ),
        }
    )
    return goals


README_SYSTEMS = ("ours", "LangChain", "litellm trim_messages", "masking M=10")
"""The strategies the README's row shows (the report has them all)."""


def readme_figures(tallies: Sequence[dict[str, Any]]) -> list[str]:
    """Return the README's figures: per window, bill / availability / far back of a few."""
    windows = sorted({t["window"] for t in tallies})
    return [
        f"window {w:,}, gpt-4o bill / available / far back: "
        + "; ".join(
            f"{t['system']} ${t['usd_openai']:.2f} / {_fmt(t['availability'])} / "
            f"{_fmt(t['far_availability'])}"
            + (f" ({t['overflows']} over)" if t["overflows"] else "")
            for name in README_SYSTEMS
            for t in tallies
            if t["window"] == w and t["system"] == name
        )
        for w in windows
    ]


def _result(
    mode: Mode,
    parts: Sequence[tuple[Workload, dict[int, Need], list[dict[str, Any]]]],
    notes: list[str],
    *,
    summaries: str | None = None,
) -> dict[str, Any]:
    price = prices()
    headline: list[str] = []
    goals: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    charts: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for load, wanted, tallies in parts:
        session = load.session
        name = session.name
        windows = sorted({t["window"] for t in tallies})
        total_refs = sum(len(n.referents) for n in wanted.values())
        far_refs = sum(len(n.far) for n in wanted.values())
        headline.append(
            f"{name}: {len(request_points(session.messages))} requests per strategy and window; "
            f"{len(wanted)} of them have referents seen earlier in their run ({total_refs} in "
            f"all, {far_refs} last seen more than {FAR_TOKENS:,} tokens back)"
        )
        headline.extend(
            f"{name} {w:,}: "
            + "; ".join(
                f"{t['system']} ${t['usd_openai']:.3f} / {_fmt(t['availability'])} "
                f"(far {_fmt(t['far_availability'])})"
                + (f" ({t['overflows']} over)" if t["overflows"] else "")
                for t in tallies
                if t["window"] == w
            )
            for w in windows
        )
        goals.extend(_goals(name, tallies))
        with_recall = any("recall" in t for t in tallies)
        if with_recall:
            for t in tallies:
                if "recall_baselines" in t:
                    headline.append(
                        f"{name} {t['window']:,}: recall of {t['questions']} fact questions "
                        "after the default stack's compactions — "
                        + "; ".join(
                            f"{o['system']} {_fmt(o['recall'])}"
                            for o in tallies
                            if o["window"] == t["window"]
                        )
                        + "; "
                        + "; ".join(f"{k} {_fmt(v)}" for k, v in t["recall_baselines"].items())
                    )
        tables.append(
            {
                "title": f"The frontier on {session.label}",
                "columns": COLUMNS + (["recall"] if with_recall else []),
                "rows": frontier_rows(tallies),
                "note": "input tokens include summary requests; a strategy is off the frontier "
                "when another at the same window has both a lower gpt-4o bill and a higher "
                "availability (the strategies that beat it are named). A request over the "
                "window counts as rejected: none of its referents is available.",
            }
        )
        charts.extend(
            {
                "file": f"fidelity_{'real' if session.source == 'real' else 'planted'}_"
                f"{w // 1024}k.png",
                "title": f"{name}, window {w:,}: bill against availability (up-left is better)",
                "x_label": "billed input, USD (OpenAI gpt-4o, cached input 0.5×)",
                "y_label": "availability (share of referents present)",
                "series": {
                    t["system"]: [[t["usd_openai"], t["availability"]]]
                    for t in tallies
                    if t["window"] == w and t["availability"] == t["availability"]
                },
            }
            for w in windows
        )
        data.update(
            {
                f"{name}/{t['window']}/{t['system']}": {k: v for k, v in t.items() if k != "system"}
                for t in tallies
            }
        )
    notes.append(
        "Prices (litellm's bundled table, after the providers' pricing pages): "
        + "; ".join(
            f"{v.model}: ${v.input * 1e6:.2f}/M input, ${v.cached * 1e6:.3f}/M cached"
            for v in price.values()
        )
        + ". OpenAI bills the common prefix from 1,024 tokens in 128-token steps at the cached "
        "price; Anthropic the common whole-message prefix from 1,024 tokens at the cache-read "
        "price. "
        + (
            f"Every summary was written by {summaries}."
            if summaries
            else "Every summariser returns the same fixed text, which holds none of the "
            "referents: a summarising strategy's availability is what it keeps verbatim (a real "
            "model's summary would carry some: --model MODEL)."
        )
    )
    return {
        "title": "Fidelity: bill against availability per context strategy",
        "mode": mode,
        "workload": " + ".join(load.session.label for load, _, _ in parts),
        "measured": (
            "per strategy and window, every request of the replayed session: exact o200k input "
            "tokens (messages as sent + the same tool schemas for all), over the window, tool "
            "pairs intact, tokens equal to a recent request's prefix, the billed input with cache "
            "prices, and availability — of the referents (paths, identifiers, numbers, hashes, "
            "quoted strings) the recorded next action uses that its run showed earlier, the share "
            "present in the request."
        ),
        "headline": headline,
        "readme": readme_figures(parts[0][2]),
        "goals": goals,
        "tables": tables,
        "charts": charts,
        "notes": notes,
        "data": data,
    }
