"""Durable sessions: append throughput, search latency, per-round cost and resident memory.

The session store (`harness.sessions`) is measured on SQLite (a file, the embedded default:
WAL, ``synchronous=NORMAL``: a returned commit survives a process crash, a power loss may
lose the last rounds; ``?synchronous=full`` fsyncs every commit) and PostgreSQL side by side. The PostgreSQL server is the test
suite's throwaway server (`tests.sessions.pg_server`: initdb in a temp folder, a free loopback
port) started here **with fsync on** (the tests run it with fsync off), so both backends pay for
durability; without server binaries or psycopg it is reported as not available and SQLite
still runs.

1. **Append throughput**: rounds of realistic events committed one after another — a user
   message, an assistant message with a tool call, a tool result of a few KB and a
   ``context_build`` manifest, one commit (one transaction) per round with a new state
   (a working history of the last ``WORKING_IDS`` message ids) — spread round-robin over
   ``SESSIONS`` sessions of one user: 100,000 events (20,000 with ``--quick``, 2,000 in
   smoke mode). Events/s = events / wall time; commit latency p50/p99. The texts come from the
   shared replays' messages; one round in five carries a generated Chinese tool output.
2. **session_search latency** over that store (the calling user owns every event): English
   and CJK queries chosen from the stored texts (frequent, medium, rare, two terms, a
   two-character CJK word — SQLite's ``LIKE`` fallback — and one with no hit), each repeated;
   p50/p95 per query and per language, ``limit=10`` as the model's tool asks. Also on that
   store: loading a session, a page of events, and the commit latency of one-message rounds
   onto a working history of ``LONG_WORKING`` ids (compaction off), each commit saying how many
   ids are unchanged as the agent's recorder does.
3. **Time the store adds to one agent round**: the shared replay (`benchmarks.workloads`)
   through `HarnessAgent` with ``middleware.default_stack()`` and a ``ScriptedModel``, once
   per store: ``sqlite://`` (in memory), a SQLite file, PostgreSQL, and the baseline — the same
   replay whose store is `NoopStore` (implements `SessionStore`, stores nothing; the agent's
   recorder still builds every event). Added time per round = (wall − baseline wall) / agent
   rounds, paired within a repeat, median over repeats (runs interleaved, order rotated);
   the time spent inside store calls is timed directly too (`TimedStore`). Goal: ≤ 1 ms with
   SQLite (file).
4. **Resident memory of a 10,000-message session** (2,000 with ``--quick``, 200 in smoke mode):
   the replay runs under ``tracemalloc`` with a SQLite file store and the agent's defaults
   (``keep_full_history=False``: RAM holds the working history, the store the full record);
   afterwards everything the
   workload holds is dropped and the agent's RAM is taken apart step by step (full history,
   recorder, state, rest of the agent), each step's freed bytes being its share. The message
   texts are fresh objects per message (as in production; the replayed copies would otherwise
   share them). Goal: the session's state (`AgentState` + recorder) under 2× the UTF-8 text
   of its working history plus ``FEW_BYTES`` per logged message. The same session resumed by
   a new agent from the file is measured too.
"""

from __future__ import annotations

import gc
import random
import re
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.bench_overhead import our_stack
from benchmarks.trajectories import NO_OUTPUT
from benchmarks.workloads import (
    FIXED_SUMMARY,
    RecordedTool,
    ReplayClient,
    Session,
    history,
    make_session,
    replay,
    replay_tools,
    stack_tool_names,
)
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.manifest import ContextManifest
from harness.messages import Message, ToolCall
from harness.policy import ContextPolicy
from harness.sessions import (
    Event,
    LoggedEvent,
    ManifestEvent,
    MessageEvent,
    SearchHit,
    SessionInfo,
    SessionKey,
    SessionStore,
    SessionUsage,
    StoredState,
    open_store,
)
from harness.tokens import approximate
from harness.tokens.calibration import LearnedRow
from providers.scripted import ScriptedModel
from tests.sessions.pg_server import PostgresServer, find_bindir

EVENTS = {"full": 100_000, "quick": 20_000, "smoke": 2_000}
"""Events appended per backend."""
EVENTS_PER_ROUND = 4
SESSIONS = {"full": 20, "quick": 20, "smoke": 4}
"""Sessions the appended rounds are spread over (round-robin), all of one user."""
WORKING_IDS = 40
"""Message ids in each appended state (a compacted working history)."""
TOOL_CHARS = 4_000
"""Tool results are cut to this many characters (results under 1,000 are not used)."""
SEARCH_REPEATS = {"full": 30, "quick": 15, "smoke": 2}
SEARCH_BUDGET_S = {"full": 10.0, "quick": 2.0, "smoke": 0.3}
"""Time per query and backend after which its repeats stop (slow queries get fewer samples)."""
READ_REPEATS = {"full": 50, "quick": 20, "smoke": 2}
LONG_WORKING = {"full": 10_000, "quick": 10_000, "smoke": 1_000}
"""Working ids of the session whose one-message rounds are committed (compaction off)."""
LONG_ROUNDS = {"full": 200, "quick": 100, "smoke": 10}
SEARCH_LIMIT = 10
REPLAY_MESSAGES = {"full": 1_500, "quick": 300, "smoke": 60}
REPLAY_REPEATS = {"full": 5, "quick": 3, "smoke": 1}
MEMORY_MESSAGES = {"full": 10_000, "quick": 2_000, "smoke": 200}
FEW_BYTES = 16
"""'A few bytes per logged message' in the memory goal."""
ROUND_GOAL_S = 1e-3
USER = "bench-user"
AGENT = "agent"
CJK = re.compile(r"[\u3400-\u9fff]+")
WORD = re.compile(r"[A-Za-z]{6,}")
ABSENT_EN = "qzxjvkwyb"
ABSENT_ZH = "量子纠缠实验"
ZH_WORDS = [
    "我们",
    "需要",
    "检查",
    "这个",
    "函数",
    "的",
    "返回值",
    "然后",
    "修复",
    "测试",
    "失败",
    "的",
    "问题",
    "上下文",
    "预算",
    "工具",
    "调用",
    "结果",
    "会话",
    "历史",
    "压缩",
    "摘要",
    "文件",
    "目录",
    "配置",
    "参数",
    "错误",
    "日志",
    "缓存",
    "模型",
    "请求",
    "响应",
]
"""The vocabulary of the generated Chinese texts (the replays have none)."""


# --------------------------------------------------------------------------- stores
class NoopStore:
    """A `SessionStore` that stores nothing: the baseline of the per-round cost."""

    def __init__(self) -> None:
        self.url = "noop://"

    async def load(self, key: SessionKey) -> tuple[StoredState, dict[str, Message]] | None:
        """Know no session."""
        return None

    async def commit(
        self, key: SessionKey, *, expected_version: int, events: Sequence[Event], state: StoredState
    ) -> int:
        """Accept the round and drop it."""
        return expected_version + 1

    async def events(
        self, key: SessionKey, *, offset: int = 0, limit: int = 100, kinds: Sequence[str] = ()
    ) -> list[LoggedEvent]:
        """Return no events."""
        return []

    async def messages(self, key: SessionKey, ids: Sequence[str]) -> dict[str, Message]:
        """Return no messages."""
        return {}

    async def sessions(
        self, user_id: str, agent_id: str | None = None, *, within: SessionKey | None = None
    ) -> list[SessionInfo]:
        """Return no sessions."""
        return []

    async def search(
        self, user_id: str, query: str, *, limit: int = 20, within: SessionKey | None = None
    ) -> list[SearchHit]:
        """Find nothing."""
        return []

    async def usage(self, key: SessionKey) -> SessionUsage:
        """Keep no usage."""
        return SessionUsage()

    async def learned(self) -> list[LearnedRow]:
        """Keep no calibration."""
        return []

    async def learn(self, rows: Sequence[LearnedRow]) -> None:
        """Keep nothing."""

    async def purge(self, key: SessionKey) -> bool:
        """Delete nothing."""
        return False

    async def purge_older_than(self, seconds: float) -> list[SessionKey]:
        """Delete nothing."""
        return []

    async def aclose(self) -> None:
        """Nothing to close."""


class TimedStore:
    """A `SessionStore` that adds up the time spent in the store it wraps (each call delegated)."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.seconds = 0.0
        """Time inside every call of the inner store."""
        self.commits: list[float] = []
        """The duration of each commit."""

    def _spent(self, started: float) -> float:
        spent = time.perf_counter() - started
        self.seconds += spent
        return spent

    async def load(self, key: SessionKey) -> tuple[StoredState, dict[str, Message]] | None:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.load(key)
        finally:
            self._spent(started)

    async def commit(
        self, key: SessionKey, *, expected_version: int, events: Sequence[Event], state: StoredState
    ) -> int:
        """Delegate and time (each commit's duration kept)."""
        started = time.perf_counter()
        try:
            return await self.inner.commit(
                key, expected_version=expected_version, events=events, state=state
            )
        finally:
            self.commits.append(self._spent(started))

    async def events(
        self, key: SessionKey, *, offset: int = 0, limit: int = 100, kinds: Sequence[str] = ()
    ) -> list[LoggedEvent]:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.events(key, offset=offset, limit=limit, kinds=kinds)
        finally:
            self._spent(started)

    async def messages(self, key: SessionKey, ids: Sequence[str]) -> dict[str, Message]:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.messages(key, ids)
        finally:
            self._spent(started)

    async def sessions(
        self, user_id: str, agent_id: str | None = None, *, within: SessionKey | None = None
    ) -> list[SessionInfo]:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.sessions(user_id, agent_id, within=within)
        finally:
            self._spent(started)

    async def search(
        self, user_id: str, query: str, *, limit: int = 20, within: SessionKey | None = None
    ) -> list[SearchHit]:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.search(user_id, query, limit=limit, within=within)
        finally:
            self._spent(started)

    async def usage(self, key: SessionKey) -> SessionUsage:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.usage(key)
        finally:
            self._spent(started)

    async def learned(self) -> list[LearnedRow]:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.learned()
        finally:
            self._spent(started)

    async def learn(self, rows: Sequence[LearnedRow]) -> None:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            await self.inner.learn(rows)
        finally:
            self._spent(started)

    async def purge(self, key: SessionKey) -> bool:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.purge(key)
        finally:
            self._spent(started)

    async def purge_older_than(self, seconds: float) -> list[SessionKey]:
        """Delegate and time."""
        started = time.perf_counter()
        try:
            return await self.inner.purge_older_than(seconds)
        finally:
            self._spent(started)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self.inner.aclose()


class DurablePostgres(PostgresServer):
    """The test suite's throwaway server, crash-safe like the SQLite store: fsync on."""

    def start(self) -> None:
        """Create the cluster and start the server with fsync and full page writes on."""
        self._run(
            str(self.bindir / "initdb"),
            *("-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"),
            *("--locale=C.UTF-8", "--no-sync", "--no-instructions"),
        )
        options = f"-p {self.port} -h 127.0.0.1 -k {self.root} -c max_connections=50"
        self._run(
            str(self.bindir / "pg_ctl"),
            *("-D", str(self.data), "-l", str(self.root / "server.log")),
            *("-o", options, "-w", "-t", "60", "start"),
        )


def start_postgres(say: Progress) -> tuple[PostgresServer | None, str]:
    """Start a PostgreSQL server; return it (or ``None``) and what was started or why not."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        return None, "not available: psycopg / psycopg_pool are not installed (the postgres extra)"
    bindir = find_bindir()
    if bindir is None:
        return None, "not available: no PostgreSQL server binaries (initdb, pg_ctl) on this machine"
    server = DurablePostgres(bindir)
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        shutil.rmtree(server.root, ignore_errors=True)
        return None, f"not available: the server did not start ({str(exc)[:200]})"
    say(f"PostgreSQL started from {bindir} on port {server.port} (fsync on)")
    return server, f"PostgreSQL from {bindir} (local, fsync on)"


async def warm(store: SessionStore) -> SessionStore:
    """Open the store (connection, schema) before anything is timed."""
    await store.sessions("nobody")
    return store


# ------------------------------------------------------------------------ workload
def realistic_rounds(
    session: Session, manifests: Sequence[ContextManifest], count: int
) -> tuple[list[list[Event]], dict[str, Any]]:
    """Return ``count`` rounds of four events each, from the session's texts (and Chinese ones)."""
    messages = session.messages
    users = [m.text[:1_000] for m in messages if m.role == "user" and m.text]
    calls = [m for m in messages if m.role == "assistant" and m.tool_calls]
    tools = [m.text[:TOOL_CHARS] for m in messages if m.role == "tool" and len(m.text) >= 1_000]
    if len(tools) < 10:
        tools = [m.text[:TOOL_CHARS] for m in messages if m.role == "tool" and m.text != NO_OUTPUT]
    rng = random.Random(1)
    chinese_tools = [chinese(rng, rng.randint(500, TOOL_CHARS)) for _ in range(40)]
    users += [chinese(rng, rng.randint(20, 200)) for _ in range(max(1, len(users) // 4))]
    if not calls:
        calls = [Message.assistant("Let me look.", tool_calls=[ToolCall(id="c", name="bash")])]
    rounds: list[list[Event]] = []
    outputs: list[str] = []
    for i in range(count):
        call = calls[i % len(calls)].tool_calls[0]
        call_id = f"call_{i:08d}"
        assistant = Message.assistant(
            calls[i % len(calls)].text or None,
            tool_calls=[ToolCall(id=call_id, name=call.name, arguments=call.arguments)],
        )
        output = (
            chinese_tools[i // 5 % len(chinese_tools)]
            if chinese_tools and i % 5 == 4
            else tools[i % len(tools)]
        )
        outputs.append(output)
        rounds.append(
            [
                MessageEvent(message=Message.user(users[i % len(users)])),
                MessageEvent(message=assistant),
                MessageEvent(message=Message.tool(call_id, output, name=call.name)),
                ManifestEvent(manifest=manifests[i % len(manifests)]),
            ]
        )
    info = {
        "tool_result_chars_mean": statistics.fmean(map(len, outputs)) if outputs else 0.0,
        "manifest_bytes_mean": statistics.fmean(len(m.to_json()) for m in manifests),
        "cjk_rounds": sum(1 for text in outputs if CJK.search(text)),
    }
    return rounds, info


def chinese(rng: random.Random, size: int) -> str:
    """Return about ``size`` characters of Chinese sentences from `ZH_WORDS`."""
    out: list[str] = []
    length = 0
    while length < size:
        sentence = "".join(rng.choice(ZH_WORDS) for _ in range(rng.randint(6, 20))) + "。"
        out.append(sentence)
        length += len(sentence)
    return "".join(out)


def pick_queries(texts: Sequence[str]) -> list[tuple[str, str, str]]:
    """Return ``(language, kind, query)`` triples chosen from ``texts`` (deterministically)."""
    unique = list(dict.fromkeys(texts))
    words: Counter[str] = Counter()
    grams4: Counter[str] = Counter()
    grams2: Counter[str] = Counter()
    grams6: Counter[str] = Counter()
    for text in unique:
        words.update({w.lower() for w in WORD.findall(text)})
        runs = CJK.findall(text)
        for n, counter in ((2, grams2), (4, grams4), (6, grams6)):
            counter.update({r[i : i + n] for r in runs for i in range(len(r) - n + 1)})
    out: list[tuple[str, str, str]] = []
    if words:
        ranked = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))
        frequent = ranked[0][0]
        target = max(2, len(unique) // 20)
        medium = min(
            (w for w, _ in ranked[1:]), key=lambda w: (abs(words[w] - target), w), default=frequent
        )
        rare = next(
            (w for w, n in sorted(ranked, key=lambda kv: kv[0]) if n == 1 and len(w) >= 8), medium
        )
        together: Counter[str] = Counter()
        for text in unique:
            found = {w.lower() for w in WORD.findall(text)}
            if medium in found:
                together.update(found - {medium})
        partner = min(together, key=lambda w: (-together[w], w), default=frequent)
        out += [
            ("English", "frequent word", frequent),
            ("English", "medium word", medium),
            ("English", "rare word", rare),
            ("English", "two terms (co-occurring)", f"{medium} {partner}"),
        ]
    out.append(("English", "no hit", ABSENT_EN))
    if grams4:
        ranked4 = sorted(grams4.items(), key=lambda kv: (-kv[1], kv[0]))
        out.append(("CJK", "frequent phrase (4 chars)", ranked4[0][0]))
        rare6 = next((g for g, n in sorted(grams6.items()) if n == 1), None)
        if rare6:
            out.append(("CJK", "rare phrase (6 chars)", rare6))
        top2 = sorted(grams2.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        out.append(("CJK", "two-character word", top2))
    out.append(("CJK", "no hit", ABSENT_ZH))
    return out


async def capture_manifests(session: Session) -> list[ContextManifest]:
    """Return the manifests of a short replay (the realistic ``context_build`` events)."""
    seen: list[ContextManifest] = []
    short = Session(
        session.name, session.source, session.description, session.system_prompt,
        session.messages[:40], 1,
    )  # fmt: skip
    inner = ScriptedModel(
        model="gpt-4o", summary=FIXED_SUMMARY, estimator=approximate(), default="(unused)"
    )
    client = ReplayClient(inner, short.messages)
    stack = our_stack()
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as workspace:
        agent = HarnessAgent(
            model=client,
            system_prompt=short.system_prompt,
            tools=replay_tools(short.messages, skip=stack_tool_names(stack)),
            stack=stack,
            policy=ContextPolicy(observer=seen.append),
            workspace=workspace,
            max_rounds=100_000,
            store=NoopStore(),
        )
        await replay(agent, short, RuntimeContext(user_id=USER, session_id="manifests"), client)
    return [m for m in seen if m.purpose == "agent"] or seen


# ------------------------------------------------------------------ 1. and 2.
async def measure_append(
    store: SessionStore, rounds: Sequence[Sequence[Event]], sessions: int, say: Progress, name: str
) -> dict[str, Any]:
    """Commit ``rounds`` one after another, round-robin over ``sessions``; return the figures."""
    keys = [SessionKey(USER, AGENT, f"s{i:03d}") for i in range(sessions)]
    versions = dict.fromkeys(keys, 0)
    working: dict[SessionKey, deque[str]] = {k: deque(maxlen=WORKING_IDS) for k in keys}
    latencies: list[float] = []
    last = time.perf_counter()
    started = last
    for index, events in enumerate(rounds):
        key = keys[index % sessions]
        ids = working[key]
        ids.extend(e.message.id for e in events if isinstance(e, MessageEvent))
        state = StoredState(working_ids=tuple(ids), title=f"session {key.session_id}")
        before = time.perf_counter()
        versions[key] = await store.commit(
            key, expected_version=versions[key], events=events, state=state
        )
        latencies.append(time.perf_counter() - before)
        if before - last > 5:
            last = before
            say(f"  {name}: {index * EVENTS_PER_ROUND:,} events appended")
    wall = time.perf_counter() - started
    events_total = sum(len(r) for r in rounds)
    return {
        "events": events_total,
        "commits": len(rounds),
        "wall_s": wall,
        "events_per_s": events_total / wall if wall else 0.0,
        "commit_p50_s": _report.percentile(latencies, 50),
        "commit_p99_s": _report.percentile(latencies, 99),
    }


async def measure_search(
    store: SessionStore, queries: Sequence[tuple[str, str, str]], repeats: int, budget_s: float
) -> dict[str, dict[str, Any]]:
    """Return p50/p95 latency and hit count of every query (``repeats`` times, within budget)."""
    out: dict[str, dict[str, Any]] = {}
    for language, kind, query in queries:
        hits = await store.search(USER, query, limit=SEARCH_LIMIT)  # warm-up, counted once
        samples: list[float] = []
        while len(samples) < repeats and sum(samples) < budget_s:
            started = time.perf_counter()
            await store.search(USER, query, limit=SEARCH_LIMIT)
            samples.append(time.perf_counter() - started)
        out[query] = {
            "language": language,
            "kind": kind,
            "hits": len(hits),
            "p50_s": _report.percentile(samples, 50),
            "p95_s": _report.percentile(samples, 95),
            "samples": samples,
        }
    return out


async def measure_long_working(store: SessionStore, ids: int, rounds: int) -> dict[str, float]:
    """Commit one-message rounds onto a working history of ``ids`` ids, as the recorder does.

    Each commit says how many leading ids are unchanged (`StoredState.unchanged`), so a store
    may write only the new one; returns the commit latency's p50 and p99.
    """
    key = SessionKey(USER, AGENT, "long-working")
    working = tuple(f"w{i:08d}" for i in range(ids))
    version = await store.commit(
        key, expected_version=0, events=[], state=StoredState(working_ids=working)
    )
    latencies: list[float] = []
    for i in range(rounds):
        message = Message.user(f"round {i}: carry on with the next step")
        state = StoredState(working_ids=(*working, message.id), unchanged=len(working))
        working = state.working_ids
        before = time.perf_counter()
        version = await store.commit(
            key, expected_version=version, events=[MessageEvent(message=message)], state=state
        )
        latencies.append(time.perf_counter() - before)
    return {
        "working_ids": float(ids),
        "commit_p50_s": _report.percentile(latencies, 50),
        "commit_p99_s": _report.percentile(latencies, 99),
    }


async def measure_reads(store: SessionStore, repeats: int) -> dict[str, float]:
    """Return the p50 latency of `load` and of an `events` page deep in a session."""
    key = SessionKey(USER, AGENT, "s000")
    logged = await store.events(key, limit=1, offset=0)
    total = next((s.events for s in await store.sessions(USER) if s.session_id == "s000"), 0)
    loads: list[float] = []
    pages: list[float] = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        await store.load(key)
        loads.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.events(key, offset=max(0, total // 2), limit=50)
        pages.append(time.perf_counter() - started)
    return {
        "load_p50_s": _report.percentile(loads, 50),
        "events_page_p50_s": _report.percentile(pages, 50),
        "session_events": float(total),
        "readable": float(bool(logged)),
    }


# ----------------------------------------------------------------------------- 3.
async def replay_once(
    session: Session, store: SessionStore, workspace: Path, session_id: str
) -> dict[str, Any]:
    """Replay ``session`` through a fresh agent on ``store``; return wall time and rounds."""
    inner = ScriptedModel(
        model="gpt-4o", summary=FIXED_SUMMARY, estimator=approximate(), default="(unused)"
    )
    client = ReplayClient(inner, session.messages)
    stack = our_stack()
    timed = TimedStore(store)
    agent = HarnessAgent(
        model=client,
        system_prompt=session.system_prompt,
        tools=replay_tools(session.messages, skip=stack_tool_names(stack)),
        stack=stack,
        workspace=str(workspace),
        max_rounds=100_000,
        store=timed,
    )
    ctx = RuntimeContext(user_id=USER, session_id=session_id)
    gc.collect()
    started = time.perf_counter()
    outcome = await replay(agent, session, ctx, client)
    wall = time.perf_counter() - started
    rounds = len(client.log)
    return {
        "wall_s": wall,
        "rounds": rounds,
        "per_round_s": wall / rounds if rounds else 0.0,
        "store_per_round_s": timed.seconds / rounds if rounds else 0.0,
        "commits": len(timed.commits),
        "commit_p50_s": _report.percentile(timed.commits, 50),
        "commit_p99_s": _report.percentile(timed.commits, 99),
        "failures": outcome.failures,
    }


async def measure_rounds(
    session: Session,
    workdir: Path,
    server: PostgresServer | None,
    repeats: int,
    say: Progress,
) -> dict[str, list[dict[str, Any]]]:
    """Replay ``session`` once per store and repeat, interleaved; return the runs by store."""
    counter = iter(range(1_000_000))

    async def noop() -> SessionStore:
        return NoopStore()

    async def memory() -> SessionStore:
        return await warm(open_store("sqlite://"))

    async def sqlite_file() -> SessionStore:
        return await warm(open_store(f"sqlite://{workdir / f'replay-{next(counter)}.db'}"))

    makers: dict[str, Callable[[], Any]] = {
        "no-op store (baseline)": noop,
        "SQLite in memory": memory,
        "SQLite file": sqlite_file,
    }
    if server is not None:
        running = server

        async def postgres() -> SessionStore:
            name = f"replay_{next(counter)}"
            running.sql(f"CREATE DATABASE {name}")
            return await warm(open_store(running.database(name)))

        makers["PostgreSQL"] = postgres
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in makers}
    names = list(makers)
    warmup = workdir / "ws-warmup"
    warmup.mkdir()
    await replay_once(session, NoopStore(), warmup, "warm-up")  # imports, tokenizer, caches
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            store: SessionStore = await makers[name]()
            workspace = workdir / f"ws-{next(counter)}"
            workspace.mkdir()
            try:
                run = await replay_once(session, store, workspace, f"replay-{repeat}")
            finally:
                await store.aclose()
            runs[name].append(run)
            say(
                f"  repeat {repeat + 1}/{repeats} {name}: {run['rounds']} rounds, "
                f"{_report.fmt_time(run['per_round_s'])}/round, store calls "
                f"{_report.fmt_time(run['store_per_round_s'])}/round"
            )
    return runs


# ----------------------------------------------------------------------------- 4.
def _fresh_texts(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Return copies whose strings are new objects (replayed copies share their texts)."""
    encoded = msgspec.msgpack.encode(list(messages))
    return tuple(msgspec.msgpack.decode(encoded, type=list[Message]))


def _text_bytes(messages: Sequence[Message]) -> int:
    return sum(
        len(m.text.encode()) + sum(len(c.arguments.encode()) for c in m.tool_calls)
        for m in messages
    )


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def _memory_session(
    size: int, url: str, workspace: Path, say: Progress
) -> tuple[HarnessAgent, RuntimeContext, dict[str, Any]]:
    """Replay a ``size``-message session; return the agent with nothing of the workload kept."""
    built = history(size)
    session = Session(
        built.name, built.source, built.description, built.system_prompt,
        _fresh_texts(built.messages), built.copies,
    )  # fmt: skip
    del built
    inner = ScriptedModel(
        model="gpt-4o", summary=FIXED_SUMMARY, estimator=approximate(), default="(unused)"
    )
    client = ReplayClient(inner, session.messages)
    stack = our_stack()
    tools = replay_tools(session.messages, skip=stack_tool_names(stack))
    agent = HarnessAgent(
        model=client,
        system_prompt=session.system_prompt,
        tools=tools,
        stack=stack,
        workspace=str(workspace),
        max_rounds=100_000,
        store=url,
    )
    ctx = RuntimeContext(user_id=USER, session_id="memory")
    last = {"t": time.perf_counter()}

    def report(done: int, total: int) -> None:
        if time.perf_counter() - last["t"] > 5:
            last["t"] = time.perf_counter()
            say(f"  memory session: {done:,}/{total:,} messages replayed")

    outcome = await replay(agent, session, ctx, client, progress=report)
    info = {
        "workload": session.label,
        "rounds": len(client.log),
        "failures": outcome.failures,
    }
    # Drop what the workload holds: the recording, the model's record, the recorded outputs.
    client.messages = ()
    client.responses.clear()
    client.log.clear()
    inner.requests.clear()
    for tool in tools:
        if isinstance(tool, RecordedTool):
            tool.results.clear()
    return agent, ctx, info


async def measure_memory(size: int, workdir: Path, say: Progress) -> dict[str, Any]:
    """Return the traced bytes of a ``size``-message session in the agent, taken apart."""
    url = f"sqlite://{workdir / 'memory.db'}"
    workspace = workdir / "ws-memory"
    workspace.mkdir()
    gc.collect()
    tracemalloc.start()
    try:
        agent, ctx, info = await _memory_session(size, url, workspace, say)
        key = agent.key(ctx)
        state = agent.states[key]
        listed = {s.session_id: s for s in await agent.store.sessions(USER)}
        working_text = _text_bytes(state.working_history)
        full_text = _text_bytes(await agent.history(ctx))  # the record, read from the store
        counts = {
            "full_history_messages": len(state.full_history),
            "working_history_messages": len(state.working_history),
            "logged_messages": listed["memory"].messages if "memory" in listed else 0,
            "logged_events": listed["memory"].events if "memory" in listed else 0,
        }
        del state
        everything = _traced()
        agent.states[key].full_history = []
        no_full = _traced()
        # The recorder is private to the agent; dropped here only to attribute its bytes.
        agent._recorders.pop(key, None)
        no_recorder = _traced()
        agent.states.pop(key)
        no_state = _traced()
        await agent.store.aclose()
        del agent
        no_agent = _traced()
        say("  memory: resuming the session in a new agent")
        resumed_agent = HarnessAgent(
            model=ScriptedModel(model="gpt-4o", estimator=approximate(), default="(unused)"),
            stack=[],  # the stack plays no part in resuming
            workspace=str(workspace),
            store=url,
        )
        await warm(resumed_agent.store)
        before = _traced()
        resumed = await resumed_agent.load(ctx)
        resumed_text = _text_bytes(resumed.working_history)
        resumed_messages = len(resumed.working_history)
        del resumed
        after = _traced()
        await resumed_agent.store.aclose()
    finally:
        tracemalloc.stop()
    return {
        **info,
        **counts,
        "working_text_bytes": working_text,
        "full_text_bytes": full_text,
        "full_history_only_bytes": everything - no_full,
        "recorder_bytes": no_full - no_recorder,
        "state_rest_bytes": no_recorder - no_state,
        "session_bytes": everything - no_state,
        "agent_rest_bytes": no_state - no_agent,
        "agent_bytes": everything - no_agent,
        "resumed_bytes": after - before,
        "resumed_working_text_bytes": resumed_text,
        "resumed_working_messages": resumed_messages,
    }


def memory_limit(working_text: int, logged: int) -> int:
    """Return the memory goal: 2× the working history's text + ``FEW_BYTES`` per logged message."""
    return 2 * working_text + FEW_BYTES * logged


# ---------------------------------------------------------------------------- run
async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Run the sessions benchmark and return its result (see `benchmarks.result.Result`)."""
    return await with_postgres("bench-sessions-", mode, progress, _measure)


Body = Callable[[str, Path, PostgresServer | None, str, Progress], Awaitable[dict[str, Any]]]


async def with_postgres(prefix: str, mode: str, say: Progress, body: Body) -> dict[str, Any]:
    """Run ``body`` in a temporary folder with a PostgreSQL server (or without, said why)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        server, pg_note = start_postgres(say)
        if server is None:
            say(f"PostgreSQL {pg_note}")
        try:
            return await body(mode, Path(folder), server, pg_note, say)
        finally:
            if server is not None:
                server.stop()


async def _measure(
    mode: str, workdir: Path, server: PostgresServer | None, pg_note: str, say: Progress
) -> dict[str, Any]:
    session = history(REPLAY_MESSAGES[mode])
    say(f"workload: {session.label}")
    runs_once = make_session(1)
    manifests = await capture_manifests(runs_once)
    rounds, append_info = realistic_rounds(runs_once, manifests, EVENTS[mode] // EVENTS_PER_ROUND)
    texts = [e.message.text for r in rounds for e in r if isinstance(e, MessageEvent)]
    queries = pick_queries(texts)
    backends: dict[str, Callable[[], SessionStore]] = {
        "SQLite file": lambda: open_store(f"sqlite://{workdir / 'append.db'}"),
    }
    if server is not None:
        server.sql("CREATE DATABASE append_bench")
        backends["PostgreSQL"] = lambda: open_store(server.database("append_bench"))
    append: dict[str, dict[str, Any]] = {}
    search: dict[str, dict[str, dict[str, Any]]] = {}
    reads: dict[str, dict[str, float]] = {}
    long: dict[str, dict[str, float]] = {}
    for name, make in backends.items():
        store = await warm(make())
        try:
            say(f"1. append: {EVENTS[mode]:,} events to {name}")
            append[name] = await measure_append(store, rounds, SESSIONS[mode], say, name)
            say(
                f"  {name}: {append[name]['events_per_s']:,.0f} events/s, commit p50 "
                f"{_report.fmt_time(append[name]['commit_p50_s'])}"
            )
            say(f"2. session_search: {len(queries)} queries × {SEARCH_REPEATS[mode]} on {name}")
            search[name] = await measure_search(
                store, queries, SEARCH_REPEATS[mode], SEARCH_BUDGET_S[mode]
            )
            reads[name] = await measure_reads(store, READ_REPEATS[mode])
            say(f"  {name}: rounds over a {LONG_WORKING[mode]:,}-id working history")
            long[name] = await measure_long_working(store, LONG_WORKING[mode], LONG_ROUNDS[mode])
        finally:
            await store.aclose()
    if server is not None:
        server.sql("CHECKPOINT")  # settle the append's writes before rounds are timed
    del rounds, texts
    say(f"3. per-round cost: replaying {len(session.messages):,} messages per store")
    runs = await measure_rounds(session, workdir, server, REPLAY_REPEATS[mode], say)
    say(f"4. memory: a {MEMORY_MESSAGES[mode]:,}-message session under tracemalloc")
    memory = await measure_memory(MEMORY_MESSAGES[mode], workdir, say)
    return _result(
        mode, session, append_info, append, search, {"reads": reads, "long": long}, runs, memory,
        pg_note,
    )  # fmt: skip


# -------------------------------------------------------------------------- result
def _signed(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "–"
    return ("−" if seconds < 0 else "+") + _report.fmt_time(abs(seconds))


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def _pooled(rows: dict[str, dict[str, Any]], language: str, q: float) -> float:
    samples = [s for r in rows.values() if r["language"] == language for s in r["samples"]]
    return _report.percentile(samples, q)


def _round_figures(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    base = runs["no-op store (baseline)"]
    out: dict[str, dict[str, Any]] = {}
    for name, items in runs.items():
        added = [
            (r["wall_s"] - b["wall_s"]) / r["rounds"]
            for r, b in zip(items, base, strict=True)
            if r["rounds"]
        ]
        out[name] = {
            "rounds": items[0]["rounds"] if items else 0,
            "per_round_s": _report.stats([r["per_round_s"] for r in items])["median"],
            "added_per_round_s": _report.stats(added)["median"] if added else 0.0,
            "added_p10_s": _report.stats(added)["p10"] if added else 0.0,
            "added_p90_s": _report.stats(added)["p90"] if added else 0.0,
            "store_per_round_s": _report.stats([r["store_per_round_s"] for r in items])["median"],
            "commit_p50_s": _report.stats([r["commit_p50_s"] for r in items])["median"],
            "commit_p99_s": _report.stats([r["commit_p99_s"] for r in items])["median"],
            "ratio": _report.ratio_stats(
                [r["per_round_s"] for r in items], [b["per_round_s"] for b in base]
            ),
            "failures": [f for r in items for f in r["failures"]],
        }
    return out


def _result(
    mode: str,
    session: Session,
    append_info: dict[str, Any],
    append: dict[str, dict[str, Any]],
    search: dict[str, dict[str, dict[str, Any]]],
    after: dict[str, dict[str, dict[str, float]]],
    runs: dict[str, list[dict[str, Any]]],
    memory: dict[str, Any],
    pg_note: str,
) -> dict[str, Any]:
    reads, long = after["reads"], after["long"]
    pg = "PostgreSQL" in append
    base_name = "SQLite file"
    headline: list[str] = []
    # 1. append
    append_rows = []
    for name, a in append.items():
        ratio = a["events_per_s"] / append[base_name]["events_per_s"]
        append_rows.append(
            [
                name,
                a["events"],
                a["commits"],
                f"{a['events_per_s']:,.0f}",
                f"{a['events_per_s'] / EVENTS_PER_ROUND:,.0f}",
                _report.fmt_time(a["commit_p50_s"]),
                _report.fmt_time(a["commit_p99_s"]),
                f"{ratio:.2f}×",
            ]
        )
    line = ", ".join(f"{n} {a['events_per_s']:,.0f} events/s" for n, a in append.items())
    if pg:
        line += f" (PostgreSQL {append['PostgreSQL']['events_per_s'] / append[base_name]['events_per_s']:.2f}× SQLite)"
    else:
        line += f"; PostgreSQL {pg_note}"
    headline.append(f"append ({EVENTS_PER_ROUND} events per commit): {line}")
    # 2. search
    search_rows = []
    for query, row in search[base_name].items():
        other = search.get("PostgreSQL", {}).get(query)
        search_rows.append(
            [
                row["language"],
                row["kind"],
                query,
                row["hits"],
                _report.fmt_time(row["p50_s"]),
                _report.fmt_time(row["p95_s"]),
                other["hits"] if other else None,
                _report.fmt_time(other["p50_s"]) if other else "–",
                _report.fmt_time(other["p95_s"]) if other else "–",
                f"{len(row['samples'])}/{len(other['samples']) if other else 0}",
            ]
        )
    pooled: dict[str, dict[str, float]] = {}
    for name, rows in search.items():
        for language in ("English", "CJK"):
            pooled[f"{name} {language}"] = {
                "p50_s": _pooled(rows, language, 50),
                "p95_s": _pooled(rows, language, 95),
            }
    parts = [
        f"{n}: English p50 {_report.fmt_time(pooled[f'{n} English']['p50_s'])} / p95 "
        f"{_report.fmt_time(pooled[f'{n} English']['p95_s'])}, CJK p50 "
        f"{_report.fmt_time(pooled[f'{n} CJK']['p50_s'])} / p95 "
        f"{_report.fmt_time(pooled[f'{n} CJK']['p95_s'])}"
        for n in search
    ]
    headline.append(f"session_search over {EVENTS[mode]:,} events — " + "; ".join(parts))
    # 3. rounds
    figures = _round_figures(runs)
    round_rows = [
        [
            name,
            f["rounds"],
            _report.fmt_time(f["per_round_s"]),
            "–" if name.startswith("no-op") else _signed(f["added_per_round_s"]),
            "–"
            if name.startswith("no-op")
            else f"{_signed(f['added_p10_s'])} … {_signed(f['added_p90_s'])}",
            _report.fmt_time(f["store_per_round_s"]),
            _report.fmt_time(f["commit_p50_s"]),
            _report.fmt_time(f["commit_p99_s"]),
            _report.fmt_ratio(f["ratio"]),
        ]
        for name, f in figures.items()
    ]
    sqlite_added = figures["SQLite file"]["added_per_round_s"]
    headline.append(
        "per agent round the store adds: "
        + ", ".join(
            f"{n} {_signed(f['added_per_round_s'])} ({_report.fmt_ratio(f['ratio'])} of the "
            "no-op round)"
            for n, f in figures.items()
            if not n.startswith("no-op")
        )
        + f"; no-op round {_report.fmt_time(figures['no-op store (baseline)']['per_round_s'])}"
    )
    # 4. memory
    limit = memory_limit(memory["working_text_bytes"], memory["logged_messages"])
    resumed_limit = memory_limit(memory["resumed_working_text_bytes"], memory["logged_messages"])
    session_ratio = memory["session_bytes"] / max(1, memory["working_text_bytes"])
    headline.append(
        f"memory of a {MEMORY_MESSAGES[mode]:,}-message session: its state holds "
        f"{_kib(memory['session_bytes'])} = {session_ratio:,.1f}× the working history's text "
        f"({_kib(memory['working_text_bytes'])}, {memory['working_history_messages']} messages); "
        f"the full history alone {_kib(memory['full_history_only_bytes'])}; resumed from the "
        f"store: {_kib(memory['resumed_bytes'])}"
    )
    per_logged = (memory["session_bytes"] - 2 * memory["working_text_bytes"]) / max(
        1, memory["logged_messages"]
    )
    memory_rows = [
        ["full history only (messages no longer in the working history)", memory["full_history_only_bytes"]],
        ["recorder (logged ids, working ids)", memory["recorder_bytes"]],
        ["working history and the rest of the state", memory["state_rest_bytes"]],
        ["= the session's state in the agent", memory["session_bytes"]],
        ["rest of the agent (stack, caches, tools, store object)", memory["agent_rest_bytes"]],
        ["the same session resumed by a new agent", memory["resumed_bytes"]],
        ["working history text (UTF-8, with tool-call arguments)", memory["working_text_bytes"]],
        ["full history text", memory["full_text_bytes"]],
        [f"goal: 2× working text + {FEW_BYTES} B × {memory['logged_messages']:,} logged messages", limit],
    ]  # fmt: skip
    goals = [
        {
            "goal": "the store adds ≤ 1 ms to an agent round with SQLite (file)",
            "met": sqlite_added <= ROUND_GOAL_S,
            "detail": f"{_signed(sqlite_added)} per round over {figures['SQLite file']['rounds']} "
            f"rounds (paired with the no-op store, median of {REPLAY_REPEATS[mode]}); time "
            f"inside the store {_report.fmt_time(figures['SQLite file']['store_per_round_s'])}"
            "/round",
        },
        {
            "goal": f"a {MEMORY_MESSAGES[mode]:,}-message session's state in the agent < 2× its "
            f"working history's text + {FEW_BYTES} B per logged message",
            "met": memory["session_bytes"] < limit,
            "detail": f"{_kib(memory['session_bytes'])} vs limit {_kib(limit)} "
            f"({memory['session_bytes'] / max(1, limit):,.1f}× the limit; "
            f"{per_logged:,.0f} B per logged message beyond 2× the working text); the "
            f"full history kept in RAM accounts for {_kib(memory['full_history_only_bytes'])}. "
            f"Resumed by a new agent: {_kib(memory['resumed_bytes'])} vs "
            f"{_kib(resumed_limit)}",
        },
    ]
    charts = [
        {
            "file": "sessions_search.png",
            "kind": "bar",
            "title": "session_search p50 latency by query",
            "x_label": "query",
            "y_label": "seconds",
            "categories": [f"{r['kind']} ({r['language']})" for r in search[base_name].values()],
            "series": {name: [r["p50_s"] for r in rows.values()] for name, rows in search.items()},
        },
        {
            "file": "sessions_round.png",
            "kind": "bar",
            "title": "agent round time by session store (median)",
            "x_label": "store",
            "y_label": "seconds per round",
            "categories": list(figures),
            "series": {"per round": [f["per_round_s"] for f in figures.values()]},
        },
    ]
    failures = [f for fig in figures.values() for f in fig["failures"]] + memory["failures"]
    notes = [
        f"PostgreSQL: {pg_note}",
        "SQLite runs WAL with synchronous=NORMAL (a returned commit survives a process crash; "
        "a power loss may lose the last rounds); PostgreSQL runs with fsync on; the full-text "
        "index of SQLite is brought up to date by the first search after commits.",
        "Search queries were chosen from the stored texts; a CJK term under three characters "
        "cannot use SQLite's trigram index and scans with LIKE.",
        "Memory figures are tracemalloc's (Python allocations); SQLite's and PostgreSQL's own "
        "caches are not counted — the stores keep nothing of a session in Python.",
        *(f"failure: {f}" for f in failures[:5]),
    ]
    read_rows = [
        [
            name,
            _report.fmt_time(r["load_p50_s"]),
            _report.fmt_time(r["events_page_p50_s"]),
            int(r["session_events"]),
            _report.fmt_time(long[name]["commit_p50_s"]),
            _report.fmt_time(long[name]["commit_p99_s"]),
        ]
        for name, r in reads.items()
    ]
    headline.append(
        f"a round's commit onto a {LONG_WORKING[mode]:,}-id working history (compaction off): "
        + ", ".join(f"{n} p50 {_report.fmt_time(x['commit_p50_s'])}" for n, x in long.items())
    )
    return {
        "title": "Durable sessions: append, search, per-round cost, memory",
        "mode": mode,
        "workload": f"replayed: {session.label}; appended: events built from the same runs' "
        f"messages (tool results ≥ 1,000 chars cut to {TOOL_CHARS:,}) with a generated Chinese "
        "tool output (fixed vocabulary, seed 1) in one round of five and Chinese user messages "
        "among the users'",
        "measured": "append: sequential commits of 4-event rounds (user, assistant with a tool "
        f"call, tool result, manifest) round-robin over {SESSIONS[mode]} sessions of one user; "
        f"search: each query {SEARCH_REPEATS[mode]}× after one warm-up, limit "
        f"{SEARCH_LIMIT}; per round: wall time of the whole replay per agent round minus that of "
        "the same replay on a no-op store, paired per repeat; memory: tracemalloc bytes freed "
        "as the agent's session is taken apart after the replay.",
        "headline": headline,
        "goals": goals,
        "tables": [
            {
                "title": "1. Append throughput",
                "columns": [
                    "backend",
                    "events",
                    "commits",
                    "events/s",
                    "commits/s",
                    "commit p50",
                    "commit p99",
                    "vs SQLite",
                ],
                "rows": append_rows,
                "note": f"tool results average {append_info['tool_result_chars_mean']:,.0f} "
                f"chars, manifests {append_info['manifest_bytes_mean']:,.0f} bytes as JSON; "
                f"{append_info['cjk_rounds']:,} rounds carry Chinese output.",
            },
            {
                "title": "2. session_search latency",
                "columns": [
                    "language",
                    "query kind",
                    "query",
                    "SQLite hits",
                    "SQLite p50",
                    "SQLite p95",
                    "PG hits",
                    "PG p50",
                    "PG p95",
                    "samples SQLite/PG",
                ],
                "rows": search_rows,
            },
            {
                "title": "Reads after the append (p50)",
                "columns": [
                    "backend",
                    "load (state + working messages)",
                    "events page of 50",
                    "events in the session",
                    f"commit onto {LONG_WORKING[mode]:,} working ids p50",
                    "… p99",
                ],
                "rows": read_rows,
            },
            {
                "title": "3. Time per agent round by store",
                "columns": [
                    "store",
                    "rounds",
                    "per round",
                    "added vs no-op",
                    "added p10 … p90",
                    "in store calls",
                    "commit p50",
                    "commit p99",
                    "vs no-op",
                ],
                "rows": round_rows,
            },
            {
                "title": f"4. Memory of a {MEMORY_MESSAGES[mode]:,}-message session",
                "columns": ["what", "bytes"],
                "rows": [[w, f"{b:,} ({_kib(b)})"] for w, b in memory_rows],
                "note": f"{memory['full_history_messages']:,} messages of the full history in RAM "
                "(the agent's default keeps the working history only), "
                f"{memory['working_history_messages']} in the working history, "
                f"{memory['logged_messages']:,} logged messages and "
                f"{memory['logged_events']:,} events in the store, {memory['rounds']:,} rounds.",
            },
        ],
        "charts": charts,
        "notes": notes,
        "data": {
            "postgres": pg_note,
            "append": append,
            "append_info": append_info,
            "search": {
                name: {q: {k: v for k, v in r.items() if k != "samples"} for q, r in rows.items()}
                for name, rows in search.items()
            },
            "search_pooled": pooled,
            "reads": reads,
            "long_working": long,
            "rounds": {
                name: {k: v for k, v in f.items() if k != "failures"} for name, f in figures.items()
            },
            "memory": {**memory, "limit_bytes": limit},
        },
    }
