"""Context fragments: list, search and edit latency at 10,000 fragments, and FragmentEditor's cost.

1. **A session with 10,000 added fragments** (300 in smoke mode) and a recorded history of
   ``LIST_HISTORY`` messages, in a SQLite file and — when the server binaries and psycopg are
   there — in PostgreSQL (the throwaway server of `benchmarks.bench_sessions`, fsync on). The
   fragments are written through the store in batches of ``BATCH`` (one transaction each,
   logged as `FragmentEvent`s like the CLI's); their texts come from the workload's messages
   (cut to 120–1,000 characters), one in five a generated Chinese text, with titles and tags
   from a fixed vocabulary. Then, each repeated, p50/p99:

   - ``Fragments.list()`` — what ``harness fragments list`` does: both sets read, the history
     merged in, the model's order; and the store's raw read of the session set;
   - ``Fragments.search(...)`` — what ``harness fragments search`` does — for a frequent and a
     rare English word, two terms, a CJK phrase, a tag alone, and a word found nowhere;
   - ``Fragments.edit(...)`` of one fragment (a write reads the set's version and that one
     fragment, `harness.fragments.ReadsOneFragment`).

2. **The time FragmentEditor adds to an agent round**: two sessions with the same
   2,000-message history (200 in smoke mode) in one SQLite file, each with 100 of its messages
   changed through `harness.fragments.Fragments` — half edited, half tool results disabled
   (their calls are then left out too). Two `HarnessAgent`\\ s with `ScriptedModel`, one stack
   ``[FragmentEditor, ToolResultOffload, BudgetFit, PairValidation]`` and the same stack
   without FragmentEditor, run ``agent.call`` rounds alternately (order swapped every repeat,
   warm-up first); the ratio is paired per repeat. No Compaction in either stack and an input
   budget above the history, so every round really sends the 2,000 messages. The time is split
   into the editor's two store reads and its pure `FragmentEditor.apply` on the same request.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.bench_sessions import WORD, chinese, warm, with_postgres
from benchmarks.workloads import Session, history
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.fragments.editing import Fragments, read_sets
from harness.fragments.model import DEFAULT_PROJECT, Fragment, FragmentChange, FragmentScope
from harness.messages import Message, new_id
from harness.policy import ContextPolicy
from harness.sessions import MessageEvent, SessionKey, SessionStore, StoredState, open_store
from harness.sessions.store import FragmentStore
from harness.tokens import approximate
from harness.types import Middleware
from middleware import BudgetFit, FragmentEditor, PairValidation, ToolResultOffload
from providers.scripted import ScriptedModel
from tests.sessions.pg_server import PostgresServer

FRAGMENTS = {"full": 10_000, "quick": 10_000, "smoke": 300}
"""Added fragments in the listed and searched session."""
LIST_HISTORY = {"full": 200, "quick": 200, "smoke": 40}
"""Recorded history messages of that session (history fragments by reference)."""
BATCH = 500
LIST_REPEATS = {"full": 50, "quick": 8, "smoke": 3}
SEARCH_REPEATS = {"full": 30, "quick": 4, "smoke": 2}
EDIT_REPEATS = {"full": 30, "quick": 5, "smoke": 2}
ROUND_HISTORY = {"full": 2_000, "quick": 2_000, "smoke": 200}
CHANGED = {"full": 100, "quick": 100, "smoke": 10}
"""Messages edited or disabled (half each) in the round benchmark."""
ROUND_REPEATS = {"full": 30, "quick": 8, "smoke": 2}
TAGS = ("rules", "api", "database", "frontend", "deploy", "security", "tests", "docs")
USER = "bench-user"
AGENT = "agent"
ABSENT = "qzxjvkwyb"
SEARCH_LIMIT = 50
"""Fragments a search returns at most (the default of `Fragments.search`)."""


# ------------------------------------------------------------------------ workload
def fragment_texts(session: Session, count: int, rng: random.Random) -> list[str]:
    """Return ``count`` fragment texts from the session's messages, one in five Chinese."""
    texts = [m.text for m in session.messages if len(m.text) >= 120]
    if not texts:
        texts = [chinese(rng, 400)]
    out: list[str] = []
    for i in range(count):
        if i % 5 == 4:
            out.append(chinese(rng, rng.randint(120, 600)))
        else:
            text = texts[i % len(texts)]
            start = rng.randrange(max(1, len(text) - 120))
            out.append(text[start : start + rng.randint(120, 1_000)])
    return out


async def fill(
    store: FragmentStore, key: SessionKey, texts: Sequence[str], messages: Sequence[Message]
) -> None:
    """Record ``messages`` as the session's history and add ``texts`` as its fragments."""
    await store.commit(
        key,
        expected_version=0,
        events=[MessageEvent(message=m) for m in messages],
        state=StoredState(working_ids=tuple(m.id for m in messages)),
    )
    scope = FragmentScope.of_session(key)
    version, _ = await store.fragments(scope)
    now = time.time()
    for start in range(0, len(texts), BATCH):
        changes = [
            FragmentChange(
                fragment=Fragment(
                    id="f-" + new_id()[:12],
                    kind="user" if n % 7 else "file",
                    title=" ".join(text.split()[:4])[:60],
                    content=text,
                    tags=(TAGS[n % len(TAGS)], TAGS[(n * 3 + 1) % len(TAGS)]),
                    created_at=now,
                    updated_at=now,
                    order=float(n),
                ),
                op="add",
                old_version=0,
            )
            for n, text in enumerate(texts[start : start + BATCH], start)
        ]
        version = await store.commit_fragments(
            scope, expected_version=version, changes=changes, log=key
        )


def pick_queries(texts: Sequence[str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """Return ``(kind, keyword, tags)`` queries chosen from ``texts`` (deterministically)."""
    words: Counter[str] = Counter()
    for text in texts:
        words.update({w.lower() for w in WORD.findall(text)})
    ranked = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))
    out: list[tuple[str, str, tuple[str, ...]]] = []
    if ranked:
        frequent = ranked[0][0]
        # Search matches substrings, so a rare word must occur once in all the text together.
        joined = "\n".join(texts).lower()
        once = (w for w, n in sorted(ranked) if n == 1 and len(w) >= 8)
        rare = next((w for w in once if joined.count(w) == 1), ranked[-1][0])
        second = ranked[min(5, len(ranked) - 1)][0]
        out += [
            ("frequent word", frequent, ()),
            ("rare word", rare, ()),
            ("two terms", f"{frequent} {second}", ()),
        ]
    out += [
        ("CJK phrase (4 chars)", "上下文预", ()),
        ("tag only", "", (TAGS[2],)),
        ("word found nowhere", ABSENT, ()),
    ]
    return out


async def timed(call: Callable[[], Awaitable[object]], repeats: int) -> list[float]:
    """Return ``repeats`` durations of ``call`` after one warm-up call."""
    await call()
    samples: list[float] = []
    for _ in range(repeats):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def latency(samples: Sequence[float]) -> dict[str, Any]:
    """Return p50, p99 and the count of ``samples``."""
    return {
        "p50_s": _report.percentile(samples, 50),
        "p99_s": _report.percentile(samples, 99),
        "n": len(samples),
    }


# ------------------------------------------------------------------------ 1.
async def measure_backend(
    store: SessionStore, mode: str, texts: Sequence[str], messages: Sequence[Message], say: Progress
) -> dict[str, Any]:
    """Fill one backend and return its list, search and edit latencies."""
    if not isinstance(store, FragmentStore):
        raise TypeError(f"{store.url} keeps no fragments")
    key = SessionKey(USER, AGENT, "fragments")
    started = time.perf_counter()
    await fill(store, key, texts, messages)
    fill_s = time.perf_counter() - started
    say(f"  {len(texts):,} fragments written in {fill_s:.1f} s")
    fragments = Fragments(store, key)
    listed = await fragments.list()
    scope = FragmentScope.of_session(key)
    out: dict[str, Any] = {
        "fill_s": fill_s,
        "listed": len(listed),
        "list": latency(await timed(fragments.list, LIST_REPEATS[mode])),
        "read_set": latency(await timed(lambda: store.fragments(scope), LIST_REPEATS[mode])),
    }
    say(f"  list p50 {_report.fmt_time(out['list']['p50_s'])} ({len(listed):,} fragments)")
    searches: dict[str, Any] = {}
    for kind, keyword, tags in pick_queries(texts):
        hits = len(await fragments.search(keyword, tags=tags, limit=SEARCH_LIMIT))

        async def search(keyword: str = keyword, tags: tuple[str, ...] = tags) -> object:
            return await fragments.search(keyword, tags=tags, limit=SEARCH_LIMIT)

        searches[kind] = {
            "query": keyword or f"--tag {' '.join(tags)}",
            "hits": hits,
            **latency(await timed(search, SEARCH_REPEATS[mode])),
        }
    out["search"] = searches
    target = next(f for f in listed if not f.message)
    counter = iter(range(1_000_000))

    async def edit() -> object:
        return await fragments.edit(target.id, content=f"{target.content} (edit {next(counter)})")

    out["edit"] = latency(await timed(edit, EDIT_REPEATS[mode]))
    return out


# ------------------------------------------------------------------------ 2.
async def prepare_round_session(
    store: FragmentStore, key: SessionKey, messages: Sequence[Message], changed: int
) -> dict[str, int]:
    """Record ``messages`` for ``key``; edit ``changed // 2`` of them and disable as many results."""
    await store.commit(
        key,
        expected_version=0,
        events=[MessageEvent(message=m) for m in messages],
        state=StoredState(working_ids=tuple(m.id for m in messages)),
    )
    fragments = Fragments(store, key)
    texts = [m for m in messages if m.role in ("user", "assistant") and m.text and not m.tool_calls]
    results = [m for m in messages if m.role == "tool"]
    half = changed // 2
    edits = texts[:: max(1, len(texts) // max(1, half))][:half]
    disables = results[:: max(1, len(results) // max(1, changed - half))][: changed - half]
    for message in edits:
        await fragments.edit(message.id, content="(edited) " + message.text[:200])
    for message in disables:
        await fragments.disable(message.id)
    return {"edited": len(edits), "disabled": len(disables)}


def round_agent(
    store: SessionStore, workspace: Path, session: Session, *, editor: bool
) -> HarnessAgent:
    """Return an agent whose stack sends the whole history (no compaction, a huge budget)."""
    stack: list[Middleware] = [ToolResultOffload(), BudgetFit(), PairValidation()]
    if editor:
        stack.insert(0, FragmentEditor())
    return HarnessAgent(
        model=ScriptedModel(default="ok", window=None, estimator=approximate()),
        system_prompt=session.system_prompt,
        stack=stack,
        store=store,
        workspace=str(workspace),
        policy=ContextPolicy(max_input_tokens=100_000_000),
    )


async def measure_round(
    session: Session, mode: str, workdir: Path, say: Progress
) -> dict[str, Any]:
    """Return the paired round times with and without FragmentEditor, and its parts."""
    store = await warm(open_store(f"sqlite://{workdir / 'round.db'}"))
    if not isinstance(store, FragmentStore):
        raise TypeError("the SQLite store keeps fragments")
    try:
        keys = {name: SessionKey(USER, AGENT, name) for name in ("with", "without", "warm-up")}
        counts: dict[str, int] = {}
        for key in keys.values():
            counts = await prepare_round_session(store, key, session.messages, CHANGED[mode])
        # One-time costs (tokenizer, imports, caches) are paid by a third agent, not timed.
        warmup = round_agent(store, workdir, session, editor=True)
        await warmup.call("continue", RuntimeContext(user_id=USER, session_id="warm-up"))
        del keys["warm-up"]
        agents = {
            name: round_agent(store, workdir, session, editor=name == "with") for name in keys
        }
        contexts = {name: RuntimeContext(user_id=USER, session_id=name) for name in keys}
        first: dict[str, float] = {}
        for name in ("without", "with"):  # the first round offloads, loads, applies the edits
            started = time.perf_counter()
            await agents[name].call("continue", contexts[name])
            first[name] = time.perf_counter() - started
            await agents[name].call("continue", contexts[name])  # warm-up
        say(f"  first rounds: with {first['with']:.3f} s, without {first['without']:.3f} s")
        times: dict[str, list[float]] = {name: [] for name in keys}
        for repeat in range(ROUND_REPEATS[mode]):
            order = ("with", "without") if repeat % 2 == 0 else ("without", "with")
            for name in order:
                started = time.perf_counter()
                await agents[name].call("continue", contexts[name])
                times[name].append(time.perf_counter() - started)
        sent = {name: _sent(agents[name]) for name in keys}
        parts = await _editor_parts(store, keys["with"], agents["without"], mode)
        return {
            **counts,
            "history": len(session.messages),
            "sent_messages": {name: len(request.history) for name, request in sent.items()},
            "left_out_transforms": sum(
                t.startswith(("fragment_disabled", "fragment_pair_left_out"))
                for t in sent["with"].transforms
            ),
            "first_round_s": first,
            "with": _report.stats(times["with"]),
            "without": _report.stats(times["without"]),
            "ratio": _report.ratio_stats(times["with"], times["without"]),
            "added": _report.stats(
                [w - o for w, o in zip(times["with"], times["without"], strict=True)]
            ),
            **parts,
        }
    finally:
        await store.aclose()


def _sent(agent: HarnessAgent) -> Any:
    client = agent.client
    if not isinstance(client, ScriptedModel):
        raise TypeError("the round agents run on ScriptedModel")
    return client.requests[-1]


async def _editor_parts(
    store: FragmentStore, key: SessionKey, baseline: HarnessAgent, mode: str
) -> dict[str, Any]:
    """Time the editor's store reads (as it reads: `read_sets`) and its pure apply.

    ``apply`` runs on the request the baseline agent sent (the same history, unedited).
    """
    session_scope = FragmentScope.of_session(key)
    project_scope = FragmentScope.of_project(key.agent_id, DEFAULT_PROJECT)

    async def reads() -> tuple[list[Fragment], list[Fragment]]:
        (_, session), (_, project) = await read_sets(store, [session_scope, project_scope])
        return session, project

    session, project = await reads()
    read_samples = await timed(reads, ROUND_REPEATS[mode] * 3)
    request = _sent(baseline)
    editor = FragmentEditor()
    apply_samples = []
    for _ in range(ROUND_REPEATS[mode] * 3):
        started = time.perf_counter()
        editor.apply(request, session, project)
        apply_samples.append(time.perf_counter() - started)
    return {
        "overlays": len(session),
        "reads": _report.stats(read_samples),
        "apply": _report.stats(apply_samples),
    }


# ---------------------------------------------------------------------------- run
async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Run the fragments benchmark and return its result (see `benchmarks.result.Result`)."""
    return await with_postgres("bench-fragments-", mode, progress, _measure)


async def _measure(
    mode: str, workdir: Path, server: PostgresServer | None, pg_note: str, say: Progress
) -> dict[str, Any]:
    session = history(ROUND_HISTORY[mode])
    say(f"workload: {session.label}")
    rng = random.Random(7)
    texts = fragment_texts(session, FRAGMENTS[mode], rng)
    listed_history = session.messages[: LIST_HISTORY[mode]]
    makers: dict[str, Callable[[], SessionStore]] = {
        "SQLite file": lambda: open_store(f"sqlite://{workdir / 'fragments.db'}"),
    }
    if server is not None:
        server.sql("CREATE DATABASE fragments_bench")
        makers["PostgreSQL"] = lambda: open_store(server.database("fragments_bench"))
    backends: dict[str, dict[str, Any]] = {}
    for name, make in makers.items():
        say(f"1. {name}: {len(texts):,} fragments, list / search / edit")
        store = await warm(make())
        try:
            backends[name] = await measure_backend(store, mode, texts, listed_history, say)
        finally:
            await store.aclose()
    say(
        f"2. FragmentEditor: rounds over {len(session.messages):,} messages with "
        f"{CHANGED[mode]} edited or disabled"
    )
    rounds = await measure_round(session, mode, workdir, say)
    return _result(mode, session, len(texts), backends, rounds, pg_note)


# -------------------------------------------------------------------------- result
def _result(
    mode: str,
    session: Session,
    fragments: int,
    backends: dict[str, dict[str, Any]],
    rounds: dict[str, Any],
    pg_note: str,
) -> dict[str, Any]:
    t = _report.fmt_time
    headline = []
    for name, b in backends.items():
        search_p50 = [s["p50_s"] for s in b["search"].values()]
        headline.append(
            f"{name}, {fragments:,} fragments: list p50 {t(b['list']['p50_s'])} / p99 "
            f"{t(b['list']['p99_s'])}; search p50 {t(min(search_p50))}–{t(max(search_p50))} "
            f"by query; edit p50 {t(b['edit']['p50_s'])}"
        )
    if "PostgreSQL" not in backends:
        headline.append(f"PostgreSQL {pg_note}")
    headline.append(
        f"FragmentEditor with {rounds['edited']} edited + {rounds['disabled']} disabled messages "
        f"in a {rounds['history']:,}-message history: a round takes "
        f"{_report.fmt_ratio(rounds['ratio'])} the round without it "
        f"(+{t(rounds['added']['median'])}: store reads {t(rounds['reads']['median'])}, "
        f"apply {t(rounds['apply']['median'])})"
    )
    list_rows = [
        [
            name,
            b["listed"],
            t(b["list"]["p50_s"]),
            t(b["list"]["p99_s"]),
            t(b["read_set"]["p50_s"]),
            t(b["read_set"]["p99_s"]),
            t(b["edit"]["p50_s"]),
            t(b["edit"]["p99_s"]),
            f"{b['fill_s']:.2f} s",
        ]
        for name, b in backends.items()
    ]
    search_rows = [
        [name, kind, s["query"][:40], s["hits"], t(s["p50_s"]), t(s["p99_s"]), s["n"]]
        for name, b in backends.items()
        for kind, s in b["search"].items()
    ]
    round_rows = [
        [
            label,
            _report.fmt_stats_time(rounds[key]),
            rounds["sent_messages"][key],
            f"{rounds['first_round_s'][key] * 1e3:,.1f} ms",
        ]
        for label, key in (("with FragmentEditor", "with"), ("without (baseline)", "without"))
    ]
    return {
        "title": "Context fragments: list, search, edit at 10,000; FragmentEditor per round",
        "mode": mode,
        "workload": f"{session.label}; fragment texts cut from these messages (120–1,000 "
        "chars), one in five generated Chinese (fixed vocabulary, seed 7)",
        "measured": f"list/search/edit: Fragments.list(), .search(), .edit() on a session of "
        f"{fragments:,} added fragments and {LIST_HISTORY[mode]} history messages, each "
        f"repeated after a warm-up (list {LIST_REPEATS[mode]}×, search {SEARCH_REPEATS[mode]}×, "
        f"edit {EDIT_REPEATS[mode]}×); round: agent.call with ScriptedModel, "
        "[FragmentEditor, ToolResultOffload, BudgetFit, PairValidation] vs the same stack "
        f"without FragmentEditor, {ROUND_REPEATS[mode]} paired repeats, order alternated; "
        "store reads and apply() timed on their own.",
        "headline": headline,
        "tables": [
            {
                "title": "1. List and edit latency",
                "columns": [
                    "backend",
                    "listed",
                    "list p50",
                    "list p99",
                    "read set p50",
                    "read set p99",
                    "edit p50",
                    "edit p99",
                    "fill",
                ],
                "rows": list_rows,
                "note": "list = Fragments.list() (both sets read, the history merged, the "
                "model's order); read set = the store's read of the session's set alone; edit = "
                "one Fragments.edit (reads the set to check its version, then one commit).",
            },
            {
                "title": "2. Search latency (Fragments.search)",
                "columns": [
                    "backend",
                    "query kind",
                    "query",
                    f"hits (at most {SEARCH_LIMIT})",
                    "p50",
                    "p99",
                    "samples",
                ],
                "rows": search_rows,
                "note": "Every search also lists the set and searches the session's messages.",
            },
            {
                "title": f"3. Agent round with a {rounds['history']:,}-message history",
                "columns": ["stack", "round (p10–p90)", "messages sent", "first round"],
                "rows": round_rows,
                "note": f"ratio {_report.fmt_ratio(rounds['ratio'])}; FragmentEditor's store "
                f"reads {_report.fmt_stats_time(rounds['reads'])}, apply() "
                f"{_report.fmt_stats_time(rounds['apply'])} ({rounds['overlays']} overlays); "
                f"{rounds['left_out_transforms']} messages or calls left out per round.",
            },
        ],
        "notes": [
            f"PostgreSQL: {pg_note}",
            "The round benchmark runs on SQLite only; both agents share one store file.",
        ],
        "data": {
            "postgres": pg_note,
            "fragments": fragments,
            "backends": backends,
            "rounds": rounds,
        },
    }
