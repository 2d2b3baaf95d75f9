"""Tokens sent: over one replayed session, what each system sends and how often it overflows.

The session is fed round by round into each system with the same window (32,768 tokens;
16,384 with ``--quick``, 12,288 in smoke mode) and the same input limit (window − 4,096
output reserve − 1,024 margin). A model request happens before every assistant message of
the recording (and at its end when a request is due there); each system's request is
counted with the **exact** tokenizer
(``harness.tokens.estimator_for("gpt-4o", exact=True)``) — messages as sent, plus the same
tool schemas and reply priming for every system — and overflows when that count exceeds
the window.

- **ours**: a `HarnessAgent` with ``middleware.default_stack()`` (Compaction's default
  trigger: 75 % of the input limit, or 200 messages), replayed through
  `benchmarks.workloads.replay` on a ``ScriptedModel`` that counts exactly and rejects a
  request over the window (so ``OverflowRetry`` really handles it: forced compaction and
  one retry, both counted). Summaries come back as a fixed ~300-token text.
- **LangChain**: ``SummarizationMiddleware`` (trigger: 50 messages or the input limit,
  like our compaction; keep: 35 % of the input limit in tokens, like our default keep
  range; a summariser returning the same fixed text) then
  ``ContextEditingMiddleware(edits=[ClearToolUsesEdit()])`` (defaults; our tool-output
  trimming is at its defaults too), driven hook by hook as a LangChain agent would, the
  summarised state persisting between rounds.
- **LangChain, our trigger**: the same, triggered as ours is by default (75 % of the input
  limit less the tool schemas, or 200 messages) and keeping 35 % of that threshold: the bill
  at equal settings, beside LangChain at its own 50-message trigger.
- **litellm**: ``trim_messages(max_tokens=input limit − tool schemas)`` on the full
  history every round (stateless). To bound the benchmark's own time it is given the
  shortest suffix of the history holding at least twice its limit, which leaves its output
  unchanged.

"Invalid tool pairs" counts requests in which a tool result lacks its call (or a call its
result): providers reject those. "Without the task" counts agent requests that no longer
hold the session's newest user message word for word.

Three comparisons follow, at 16,384 and 32,768 tokens (12,288 in smoke mode; the main
window's runs are reused):

- **cache breakpoints** (`marked_cache`): our requests billed on Anthropic's prices without
  ``cache_control`` marks (Anthropic then caches nothing), with one on the newest message,
  and with the marks ``LiteLLMClient`` places (`providers.cache_breakpoints`);
- **the cost trigger**: ours with ``Compaction(trigger="cost", prices=…)`` at gpt-4o's and at
  Sonnet 4.5's prices, beside ours at the plain trigger, LangChain at both triggers and
  litellm (at 32,768 in full mode only: its trimming is the slow part of the run);
- **provider-reported cache** (`provider_cache`): small sessions through litellm to the
  local caching servers of ``tests/integration`` (OpenAI-style and Anthropic-style): the
  cached share they report against our manifests' expectation and the bill rule's, and the
  cache verdicts.

The workload is the shared SWE-agent runs when ``../shared`` holds them, else generated runs
(`benchmarks.workloads`); the result names the one used.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.peers import LangChainPeer, from_langchain, our_stack, to_langchain, trim_messages
from benchmarks.workloads import (
    FIXED_SUMMARY,
    ReplayClient,
    Session,
    Source,
    make_session,
    replay,
    replay_tools,
    request_points,
    request_ready,
    stack_tool_names,
)
from harness.accounting import REPLY_PRIMING
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.messages import Message
from harness.tokens import TokenEstimator, estimator_for, tiktoken_encoding
from harness.types import Middleware
from middleware.compaction._settings import DEFAULT_TRIGGER, DEFAULT_TRIGGER_MESSAGES
from providers.cache_breakpoints import count_marks, place_breakpoints
from providers.scripted import ScriptedModel

WINDOW = {"full": 32_768, "quick": 16_384, "smoke": 12_288}
"""The window every system gets (smaller in the short modes: litellm's trimming costs the
square of the messages it keeps, per request)."""
RESERVE = 4_096 + 1_024
MESSAGES = {"full": 600, "quick": 300, "smoke": 70}
"""Recorded messages replayed (cut where a request is due)."""
KEEP_FRACTION = 0.35
SOURCE: Source = "auto"
"""The workload: the shared SWE-agent runs when present, else generated ones (tests set it)."""


class Counter:
    """Exact token counts of what a system sends, the same function for every system."""

    def __init__(self, tool_tokens: int) -> None:
        self.estimator: TokenEstimator = estimator_for("gpt-4o", exact=True)
        self.tool_tokens = tool_tokens

    def request(self, messages: Sequence[Message], *, tools: bool = True) -> int:
        """Return the input tokens of ``messages`` (System included) + tools + priming."""
        total = (self.tool_tokens if tools else 0) + REPLY_PRIMING
        for message in messages:
            if message.id.startswith("render/"):
                digest = hashlib.blake2b(message.text.encode(), digest_size=12).hexdigest()
                message = message.replace(id=f"render/{digest}")
            total += self.estimator.count_message(message)
        return total


PRICE_MODELS = {
    "OpenAI": "gpt-4o",
    "Anthropic": "claude-sonnet-4-5-20250929",
    "OpenAI gpt-5": "gpt-5",
}
"""gpt-4o bills cached input at 0.5×, Sonnet 4.5 and gpt-5 at 0.1×: where a system's bill
stands depends on the discount, so both ends are priced (gpt-5 with OpenAI's caching rule)."""
"""The models whose published prices bill the replay (read from litellm's bundled price table)."""
OPENAI_MIN_PREFIX = 1_024
"""OpenAI caches a prompt's prefix from 1,024 tokens on, in steps of `OPENAI_STEP` tokens."""
OPENAI_STEP = 128
ANTHROPIC_MIN_PREFIX = 1_024
"""Anthropic caches prefixes of at least 1,024 tokens (Sonnet), ending at a content block."""


@dataclass(frozen=True)
class Price:
    """One model's input prices per token, from litellm's bundled price table."""

    model: str
    input: float
    cached: float
    """Price of an input token read from the provider's prompt cache."""
    write: float | None
    """Price of an input token written to the cache (Anthropic), None where writes are free."""


@functools.cache
def prices() -> dict[str, Price]:
    """Return the input prices of `PRICE_MODELS` from litellm's local price table."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    out = {}
    for provider, model in PRICE_MODELS.items():
        info = litellm.model_cost[model]
        out[provider] = Price(
            model=model,
            input=float(info["input_cost_per_token"]),
            cached=float(info["cache_read_input_token_cost"]),
            write=info.get("cache_creation_input_token_cost"),
        )
    return out


CACHE_ENTRIES = 8
"""How many recent requests a provider's cache is taken to hold (all are within its TTL here)."""


class PrefixMeter:
    """Per request, the tokens a provider's prompt cache can serve: the longest common prefix
    with one of the recent requests (agent and summary requests alike).

    A request is serialised as the tool schemas (when it has tools: always the same ones,
    so always part of a common prefix between two requests with tools) then each message's
    OpenAI form; messages are tokenised one by one (o200k, cached by content), and the
    common prefix with an earlier request is the identical leading messages plus the common
    leading tokens of the first one that differs. ``whole`` also keeps the prefix that ends
    at a message boundary (Anthropic caches whole content blocks). The same rule measures
    every system.
    """

    def __init__(self, tool_tokens: int) -> None:
        self._encode = tiktoken_encoding("o200k_base").encode
        self._pieces: dict[str, tuple[list[int], bytes]] = {}
        self.tool_tokens = tool_tokens
        self._recent: deque[tuple[bool, list[list[int]]]] = deque(maxlen=CACHE_ENTRIES)
        self.kinds: list[str] = []
        """``agent`` or ``summary``, per request, in the order they were sent."""
        self.tokens: list[int] = []
        """Each request's exact input tokens."""
        self.prefix: list[int] = []
        """Tokens shared with a recent request's start, per request."""
        self.whole: list[int] = []
        """The same, cut back to the last whole message in common."""
        self.layouts: list[tuple[list[bytes], list[int]]] = []
        """Per request, its pieces (the tool schemas when it has tools, then each message):
        a digest of the prefix ending with each piece and the tokens up to its end (scaled
        like ``prefix``), for `marked_cache`."""

    def add(
        self, messages: Sequence[Message], total: int, *, kind: str = "agent", tools: bool = True
    ) -> None:
        """Measure one request's longest common prefix with a recent one and remember it.

        The prefix is counted on the JSON form and scaled to ``total``, the request's exact
        count, so that cached tokens never exceed what the request is billed for.
        """
        pieces = [self._piece(_openai_text(m)) for m in messages]
        current = [tokens for tokens, _ in pieces]
        best_whole = best = 0
        for old_tools, old in self._recent:
            if old_tools != tools:
                continue  # one starts with tool schemas, the other with a message
            whole = self.tool_tokens if tools else 0
            partial = 0
            for before, now in zip(old, current, strict=False):
                if before == now:
                    whole += len(now)
                    continue
                partial = _common(before, now)
                break
            best = max(best, whole + partial)
            best_whole = max(best_whole, whole)
        size = (self.tool_tokens if tools else 0) + sum(len(t) for t in current)
        scale = total / max(1, size)
        self.kinds.append(kind)
        self.tokens.append(total)
        self.prefix.append(min(total, round(best * scale)))
        self.whole.append(min(total, round(best_whole * scale)))
        self._recent.append((tools, current))
        self.layouts.append(self._layout(pieces, scale, tools=tools))

    def _layout(
        self, pieces: Sequence[tuple[list[int], bytes]], scale: float, *, tools: bool
    ) -> tuple[list[bytes], list[int]]:
        running = hashlib.blake2b(b"tools" if tools else b"no tools", digest_size=16).digest()
        digests, ends = [], []
        tokens = 0
        if tools:
            tokens = self.tool_tokens
            digests.append(running)
            ends.append(round(tokens * scale))
        for part, digest in pieces:
            running = hashlib.blake2b(running + digest, digest_size=16).digest()
            tokens += len(part)
            digests.append(running)
            ends.append(round(tokens * scale))
        return digests, ends

    def of(self, kind: str) -> tuple[list[int], list[int], list[int]]:
        """Return the tokens, prefix and whole prefix of the requests of one ``kind``."""
        chosen = [i for i, k in enumerate(self.kinds) if k == kind]
        return (
            [self.tokens[i] for i in chosen],
            [self.prefix[i] for i in chosen],
            [self.whole[i] for i in chosen],
        )

    def message_tokens(self, message: Message) -> list[int]:
        """Return the o200k tokens of one message's OpenAI JSON (cached by content)."""
        return self._piece(_openai_text(message))[0]

    def _piece(self, text: str) -> tuple[list[int], bytes]:
        """Return the tokens of one message's JSON text and a digest of it (cached)."""
        found = self._pieces.get(text)
        if found is None:
            tokens = self._encode(text, disallowed_special=())
            found = self._pieces[text] = (tokens, hashlib.blake2b(text.encode()).digest()[:16])
        return found


def _openai_text(message: Message) -> str:
    return json.dumps(message.to_openai(), ensure_ascii=False, sort_keys=True)


LOOKBACK = 20
"""How many blocks before a mark Anthropic looks for an earlier cache entry (here: messages)."""


def marked_cache(meter: PrefixMeter, marks: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Return, per request, the tokens Anthropic reads from its cache and writes to it.

    ``marks``: per request of ``meter``, the pieces (`PrefixMeter.layouts`) that carry a
    ``cache_control`` mark. Anthropic's rule, as ``tests/integration/anthropic_server.py``
    implements it: a mark writes the prefix ending there (from `ANTHROPIC_MIN_PREFIX`
    tokens); a request reads the longest earlier entry that ends at one of its marks or at
    most `LOOKBACK` pieces before one; what lies between the read and the last write is
    written (billed at the write price), the rest is fresh input. Entries do not expire
    (the replay's rounds are seconds apart, well inside the 5-minute TTL). Unmarked
    requests read and write nothing.
    """
    entries: set[bytes] = set()
    reads: list[int] = []
    writes: list[int] = []
    for (digests, ends), marked in zip(meter.layouts, marks, strict=True):
        read = 0
        for mark in marked:
            for j in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if digests[j] in entries:
                    read = max(read, ends[j])
                    break
        written = 0
        for mark in marked:
            if ends[mark] >= ANTHROPIC_MIN_PREFIX:
                entries.add(digests[mark])
                written = max(written, ends[mark])
        reads.append(read)
        writes.append(max(0, written - read))
    return reads, writes


def end_marks(meter: PrefixMeter) -> list[list[int]]:
    """One mark per request, on its newest message: the simplest way to use Anthropic's cache."""
    return [[len(ends) - 1] if ends else [] for _, ends in meter.layouts]


def marked_bill(
    meter: PrefixMeter, marks: Sequence[Sequence[int]], price: Price, prefix: str
) -> dict[str, float | int]:
    """Return the tokens read, written and fresh, and the Anthropic bill, under ``marks``."""
    reads, writes = marked_cache(meter, marks)
    total, read, write = sum(meter.tokens), sum(reads), sum(writes)
    rate = price.write if price.write is not None else price.input
    return {
        f"{prefix}_read_tokens": read,
        f"{prefix}_write_tokens": write,
        f"{prefix}_fresh_tokens": total - read - write,
        f"usd_{prefix}": (total - read - write) * price.input + read * price.cached + write * rate,
    }


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def bill(meter: PrefixMeter, price: dict[str, Price]) -> dict[str, float | int]:
    """Return the cached tokens and the billed input cost (USD) with and without caching.

    Every request, agent and summary alike, is billed the same way: OpenAI bills the cached
    part (`PrefixMeter.prefix` from 1,024 tokens, in 128-token steps) at its cached price;
    Anthropic bills the cached part (`PrefixMeter.whole`, from 1,024 tokens) at its
    cache-read price, and — in ``anthropic_with_writes`` — the rest of each agent request at
    its cache-write price (a cache breakpoint at the end of every agent request; summary
    requests set none).
    """
    tokens, prefix, whole = meter.tokens, meter.prefix, meter.whole
    openai_cached = [
        0 if p < OPENAI_MIN_PREFIX else min(t, p // OPENAI_STEP * OPENAI_STEP)
        for t, p in zip(tokens, prefix, strict=True)
    ]
    anthropic_cached = [
        0 if w < ANTHROPIC_MIN_PREFIX else min(t, w) for t, w in zip(tokens, whole, strict=True)
    ]
    total = sum(tokens)
    o, a, o5 = price["OpenAI"], price["Anthropic"], price["OpenAI gpt-5"]
    oc, ac = sum(openai_cached), sum(anthropic_cached)
    write = a.write if a.write is not None else a.input
    uncached_agent = sum(
        t - c for t, c, k in zip(tokens, anthropic_cached, meter.kinds, strict=True) if k == "agent"
    )
    uncached_summary = total - ac - uncached_agent
    return {
        "prefix_tokens": sum(meter.of("agent")[1]),
        "summary_cached_tokens": sum(
            c for c, k in zip(openai_cached, meter.kinds, strict=True) if k == "summary"
        ),
        "openai_cached_tokens": oc,
        "anthropic_cached_tokens": ac,
        "cached_share": oc / total if total else 0.0,
        "usd_no_cache_openai": total * o.input,
        "usd_openai": (total - oc) * o.input + oc * o.cached,
        "usd_openai_gpt5": (total - oc) * o5.input + oc * o5.cached,
        "usd_no_cache_anthropic": total * a.input,
        "usd_anthropic": (total - ac) * a.input + ac * a.cached,
        "usd_anthropic_with_writes": uncached_agent * write
        + ac * a.cached
        + uncached_summary * a.input,
    }


BIG_BREAK = 1_000
"""A request that reuses all but fewer tokens of the previous one only re-sent its tail."""


def cache_breaks(tokens: Sequence[int], prefix: Sequence[int]) -> dict[str, int]:
    """Return how much of each previous request the next one did not reuse, and how often.

    A pure append reuses all of the previous request. Material placed after the history
    (state and reference blocks) is re-sent every round: a small break. Compaction, trims or
    any rewrite near the front drop most of the previous request: a big break.
    """
    dropped = [max(0, before - p) for before, p in zip(tokens, prefix[1:], strict=False)]
    big = [d for d in dropped if d >= BIG_BREAK]
    small = [d for d in dropped if 0 < d < BIG_BREAK]
    return {
        "not_reused_tokens": sum(dropped),
        "big_breaks": len(big),
        "big_break_tokens": sum(big),
        "small_breaks": len(small),
        "small_break_tokens": sum(small),
    }


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


def carries_task(sent: Sequence[Message], task: Message | None) -> bool:
    """Return whether ``sent`` still holds ``task`` (the newest user message so far), word for word."""
    if task is None:
        return True
    text = task.text
    return any(m.id == task.id or (text and text in m.text) for m in sent)


def latest_user(messages: Sequence[Message]) -> list[Message | None]:
    """Return, for each position ``i``, the newest user message among ``messages[:i]``."""
    out: list[Message | None] = [None]
    for message in messages:
        out.append(message if message.role == "user" else out[-1])
    return out


def _tally(
    name: str,
    window: int,
    invalid: int,
    meter: PrefixMeter,
    *,
    task_missing: int,
    marks: Sequence[Sequence[int]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    tokens, prefix, whole = meter.of("agent")
    summary = meter.of("summary")[0]
    anthropic = prices()["Anthropic"]
    marked = marked_bill(meter, end_marks(meter), anthropic, "anthropic_end_mark")
    if marks is not None:
        marked |= marked_bill(meter, marks, anthropic, "anthropic_breakpoints")
    own = "anthropic_breakpoints" if marks is not None else "anthropic_end_mark"
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
        "prefix_per_request": prefix,
        "whole_prefix_per_request": whole,
        "task_missing": task_missing,
        **cache_breaks(tokens, prefix),
        **bill(meter, prices()),
        **marked,
        "usd_anthropic_marked": marked[f"usd_{own}"],
        "anthropic_marks": own.removeprefix("anthropic_"),
        **extra,
    }


# ------------------------------------------------------------------------------ ours
async def run_ours(
    session: Session,
    window: int,
    progress: Progress,
    *,
    name: str = "ours",
    compaction: Middleware | None = None,
) -> tuple[dict[str, Any], int]:
    """Replay ``session`` through our agent; return its tally and the tool-schema tokens.

    ``compaction``: the `Compaction` of the stack (default: ``Compaction()``). Every request
    is also marked as `providers.LiteLLMClient` marks it for Anthropic (`place_breakpoints`),
    for the bill with cache breakpoints.
    """
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
    stack = our_stack(compaction=compaction or True)
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
        bar = _report.ProgressBar(progress, f"messages replayed ({name})", len(session.messages))

        def report(done: int, total: int) -> None:
            bar.step(count=done - bar.done)

        outcome = await replay(agent, session, ctx, client, progress=report)
    invalid = missing = 0
    meter = PrefixMeter(counter.tool_tokens)
    marks: list[list[int]] = []
    position = {m.id: i for i, m in enumerate(session.messages)}
    tasks = latest_user(session.messages)
    bar = _report.ProgressBar(progress, f"requests counted exactly ({name})", len(inner.requests))
    for request in inner.requests:  # agent and summary requests, in the order they were sent
        bar.step()
        rendered = request.render()
        tools = bool(request.tools)
        kind = "summary" if request.ids.purpose == "summary" else "agent"
        meter.add(rendered, counter.request(rendered, tools=tools), kind=kind, tools=tools)
        marks.append(breakpoints_of(rendered, tools=len(request.tools)))
        if kind == "agent":
            invalid += pair_problems(request.history) > 0
            # the session's newest message in the request says how far the replay got
            reached = max((position.get(m.id, -1) for m in request.history), default=-1)
            missing += not carries_task(rendered, tasks[reached + 1])
    tally = _tally(
        name,
        window,
        invalid,
        meter,
        task_missing=missing,
        marks=marks,
        rejected_by_provider=inner.overflows,
        failures=outcome.failures,
        transforms=sorted({t.split(":", 1)[0] for r in inner.agent_requests for t in r.transforms}),
    )
    return tally, counter.tool_tokens


def breakpoints_of(rendered: Sequence[Message], *, tools: int) -> list[int]:
    """Return the pieces (`PrefixMeter.layouts`) `place_breakpoints` marks in this request."""
    wire = [m.to_openai() for m in rendered]
    schemas: list[dict[str, Any]] = [{"type": "function"} for _ in range(tools)]
    place_breakpoints(rendered, wire, schemas or None)
    offset = 1 if tools else 0
    marked = [i + offset for i, message in enumerate(wire) if count_marks([message], None)]
    if schemas and count_marks([], schemas):
        marked.insert(0, 0)
    return marked


# -------------------------------------------------------------------------- LangChain
LANGCHAIN_OUR_TRIGGER = "LangChain, our trigger"
"""LangChain triggered and keeping as our default Compaction does (one of the goals' peers)."""
LANGCHAIN_READS_ALL = "LangChain, summary reads all"
"""The LangChain variant whose summariser reads the whole early part, as ours does (its
default cuts the summary input to 4,000 tokens): reported beside the goals, not in them."""


def run_langchain(
    session: Session,
    window: int,
    counter: Counter,
    progress: Progress | None = None,
    *,
    reads_all: bool = False,
    our_trigger: bool = False,
) -> dict[str, Any]:
    """Feed ``session`` through LangChain's summarisation and context-editing hooks.

    ``reads_all``: ``trim_tokens_to_summarize=None`` (the summariser reads every message it
    replaces, like ours) instead of LangChain's default 4,000-token cut. ``our_trigger``:
    triggered and keeping as our default Compaction (`DEFAULT_TRIGGER` of the input limit or
    `DEFAULT_TRIGGER_MESSAGES` messages; 35 % of the threshold kept) instead of at 50 messages.
    """
    limit = window - RESERVE
    meter = PrefixMeter(counter.tool_tokens)

    def summarize(messages: list[Any]) -> str:
        # What a chat-model summariser would receive: LangChain's own summary prompt around
        # the messages it selected (already trimmed to its summary-input limit), no tools.
        sent = [Message.user(peer.summary_prompt(messages))]
        meter.add(sent, counter.request(sent, tools=False), kind="summary", tools=False)
        return FIXED_SUMMARY

    threshold, messages = limit, 50
    if our_trigger:
        threshold, messages = int(DEFAULT_TRIGGER * limit), DEFAULT_TRIGGER_MESSAGES
    peer = LangChainPeer(
        session.system_prompt,
        trigger=[("messages", messages), ("tokens", threshold - counter.tool_tokens)],
        keep=("tokens", int(KEEP_FRACTION * threshold)),
        summarizer=summarize,
        **({"trim_tokens_to_summarize": None} if reads_all else {}),
    )
    system_message = Message.system(session.system_prompt)
    originals = {m.id: m for m in session.messages}
    state: list[Any] = []
    cursor = 0
    invalid = 0
    name = (
        LANGCHAIN_READS_ALL if reads_all else LANGCHAIN_OUR_TRIGGER if our_trigger else "LangChain"
    )
    tasks = latest_user(session.messages)
    missing = 0
    tick = _ticker(name, len(request_points(session.messages)), progress)
    for point in request_points(session.messages):
        tick()
        state.extend(to_langchain(session.messages[cursor:point]))
        cursor = point
        sent = [system_message, *from_langchain(peer.round(state), originals)]
        meter.add(sent, counter.request(sent))
        invalid += pair_problems(sent[1:]) > 0
        missing += not carries_task(sent, tasks[point])
    return _tally(name, window, invalid, meter, task_missing=missing, variant=reads_all)


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
    invalid = missing = 0
    tasks = latest_user(session.messages)
    meter = PrefixMeter(counter.tool_tokens)
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
        request = [system_message, *sent]
        meter.add(request, counter.request(request))
        invalid += pair_problems(sent) > 0
        missing += not carries_task(request, tasks[point])
    return _tally("litellm", window, invalid, meter, task_missing=missing)


def _ticker(name: str, total: int, progress: Progress | None) -> Callable[[], None]:
    """Return a function to call once per request; it reports a progress bar now and then."""
    if progress is None:
        return lambda: None
    bar = _report.ProgressBar(progress, f"{name} requests", total, every_s=5.0)
    return bar.step


def _key(data: dict[str, Any]) -> tuple[Any, ...]:
    calls = tuple((c["id"], c["function"]["arguments"]) for c in data.get("tool_calls") or ())
    return (data.get("role"), str(data.get("content")), data.get("tool_call_id"), calls)


# ------------------------------------------------------------------------------ driver
async def measure(mode: Mode, progress: Progress) -> dict[str, Any]:
    """Replay one session through every system and count what each sends."""
    window = WINDOW[mode]
    whole = make_session(MESSAGES[mode], source=SOURCE)
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
    systems += _peers(session, window, counter, progress, notes, (*PEERS, LANGCHAIN_READS_ALL))
    compared: dict[int, list[dict[str, Any]]] = {}
    for size in COMPARE_WINDOWS[mode]:
        if size == window:
            base = [s for s in systems if not s.get("variant")]
        else:
            other, _ = await run_ours(session, size, progress)
            names = [p for p in PEERS if p != "litellm" or size <= LITELLM_UP_TO[mode]]
            if len(names) < len(PEERS):
                notes.append(
                    f"litellm at {size:,} tokens: full mode only (its trimming costs the square "
                    "of the messages it keeps, per request)"
                )
            base = [other, *_peers(session, size, Counter(tool_tokens), progress, notes, names)]
        compared[size] = [base[0], *await _cost_runs(session, size, progress), *base[1:]]
    reported = await provider_cache(session, mode, progress)
    return _result(mode, session, window, systems, notes, compared, reported)


PEERS = ("LangChain", LANGCHAIN_OUR_TRIGGER, "litellm")
"""The goals' peers, by name (`_peers`)."""
COMPARE_WINDOWS: dict[str, tuple[int, ...]] = {
    "full": (16_384, 32_768),
    "quick": (16_384, 32_768),
    "smoke": (12_288,),
}
"""The windows of the breakpoint and cost-trigger comparisons (the main window's runs are reused)."""
LITELLM_UP_TO = {"full": 32_768, "quick": 16_384, "smoke": 12_288}
"""The largest window litellm's trimming is run at in each mode (it bounds the run's time)."""
COST_TRIGGER = {
    "OpenAI": "ours, cost trigger (OpenAI prices)",
    "Anthropic": "ours, cost trigger (Anthropic prices)",
}
"""The cost-aware runs: ``Compaction(trigger="cost", prices=...)`` at each provider's prices."""


def _peers(
    session: Session,
    window: int,
    counter: Counter,
    progress: Progress,
    notes: list[str],
    names: Sequence[str],
) -> list[dict[str, Any]]:
    """Run the named peers at ``window``; a peer whose package is missing is noted, not run."""
    runners: dict[str, Callable[..., dict[str, Any]]] = {
        "LangChain": run_langchain,
        LANGCHAIN_OUR_TRIGGER: functools.partial(run_langchain, our_trigger=True),
        "litellm": run_litellm,
        LANGCHAIN_READS_ALL: functools.partial(run_langchain, reads_all=True),
    }
    out = []
    for name in names:
        try:
            out.append(runners[name](session, window, counter, progress))
        except ImportError as exc:
            notes.append(f"{name} was not run: {exc} (install the bench extra)")
            continue
        progress(
            f"{name} at {window:,}: {out[-1]['requests']} requests, "
            f"{out[-1]['total_tokens']:,} tokens"
        )
    return out


async def _cost_runs(session: Session, window: int, progress: Progress) -> list[dict[str, Any]]:
    """Replay ``session`` with ``Compaction(trigger="cost")`` at OpenAI's and Anthropic's prices."""
    from middleware import Compaction
    from providers import LiteLLMClient

    out = []
    for provider, name in COST_TRIGGER.items():
        model = PRICE_MODELS[provider]
        found = LiteLLMClient(model).token_prices()  # litellm's table; Anthropic: with marks
        if found is None:
            raise RuntimeError(f"litellm's price table has no prices for {model}")
        compaction = Compaction(trigger="cost", prices=found)
        tally, _ = await run_ours(session, window, progress, name=name, compaction=compaction)
        tally["priced_as"] = provider
        out.append(tally)
        progress(
            f"{name} at {window:,}: {tally['requests']} requests, {tally['summary_requests']} "
            f"compactions, {tally['total_tokens']:,} tokens"
        )
    return out


def readme_figures(systems: Sequence[dict[str, Any]], window: int) -> list[str]:
    """Return the README's figures: the bills relative to ours, overflows and broken pairs.

    ``systems`` are the tallies, ours first (a saved result's ``data`` values will do).
    """
    ours, peers = systems[0], systems[1:]
    return [
        f"{len(ours['per_request'])} requests at a {window:,}-token window, billed input with "
        "prompt caching (OpenAI gpt-4o / Anthropic Sonnet 4.5 / OpenAI gpt-5 prices) relative to "
        "ours: "
        + "; ".join(
            f"{p['system']} "
            + " / ".join(
                f"{p[key] / max(1e-12, ours[key]):.2f}×"
                for key in ("usd_openai", "usd_anthropic", "usd_openai_gpt5")
                if key in p and key in ours
            )
            for p in peers
        ),
        "overflows / requests with broken tool pairs: "
        + "; ".join(f"{s['system']} {s['overflows']} / {s['invalid_pairs']}" for s in systems),
    ]


SERIES = ("per_request", "prefix_per_request", "whole_prefix_per_request")
"""Per-request lists, saved for the main window's systems only."""


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base > 0 else "–"


def breakpoint_rows(compared: dict[int, list[dict[str, Any]]]) -> list[list[Any]]:
    """Return the rows of the Anthropic bill of our runs without marks, with one, with ours."""
    rows: list[list[Any]] = []
    for size, runs in compared.items():
        for s in runs:
            if not s["system"].startswith("ours") or s.get("priced_as") == "OpenAI":
                continue
            unmarked = s["usd_no_cache_anthropic"]
            for label, key in (
                ("none", None),
                ("one, on the newest message", "anthropic_end_mark"),
                ("ours (place_breakpoints)", "anthropic_breakpoints"),
            ):
                read = s[f"{key}_read_tokens"] if key else 0
                write = s[f"{key}_write_tokens"] if key else 0
                usd = s[f"usd_{key}"] if key else unmarked
                rows.append(
                    [
                        f"{size:,}",
                        s["system"],
                        label,
                        s["total_tokens"],
                        read,
                        write,
                        s["total_tokens"] - read - write,
                        f"${usd:.3f}",
                        _ratio(usd, unmarked),
                    ]
                )
    return rows


def cost_rows(compared: dict[int, list[dict[str, Any]]]) -> list[list[Any]]:
    """Return the rows of the cost-trigger comparison: each run's bills beside ours, per window."""
    rows: list[list[Any]] = []
    for size, runs in compared.items():
        ours = runs[0]
        for s in runs:
            rows.append(
                [
                    f"{size:,}",
                    s["system"],
                    s["requests"],
                    s["summary_requests"],
                    s["total_tokens"],
                    f"${s['usd_openai']:.3f}",
                    _ratio(s["usd_openai"], ours["usd_openai"]),
                    f"${s['usd_anthropic_marked']:.3f}",
                    _ratio(s["usd_anthropic_marked"], ours["usd_anthropic_marked"]),
                    s["anthropic_marks"].replace("_", " "),
                    s["overflows"],
                    s["invalid_pairs"],
                    s["task_missing"],
                ]
            )
    return rows


def compare_goals(compared: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Return the goals of the breakpoint and cost-trigger comparisons."""
    ours_runs = [s for runs in compared.values() for s in runs if s["system"].startswith("ours")]
    plain = {size: runs[0] for size, runs in compared.items()}

    def cost(size: int, provider: str) -> dict[str, Any]:
        return next(s for s in compared[size] if s.get("priced_as") == provider)

    pairs = [
        (size, provider, key, cost(size, provider)[key], plain[size][key])
        for size in compared
        for provider, key in (("OpenAI", "usd_openai"), ("Anthropic", "usd_anthropic_marked"))
    ]
    return [
        {
            "goal": "cache breakpoints lower our Anthropic bill at every window",
            "met": all(
                s["usd_anthropic_breakpoints"] < s["usd_no_cache_anthropic"] for s in ours_runs
            ),
            "detail": ", ".join(
                f"{s['system']} at {size:,}: ${s['usd_anthropic_breakpoints']:.3f} marked vs "
                f"${s['usd_no_cache_anthropic']:.3f} unmarked"
                for size, runs in compared.items()
                for s in runs[:1]
            ),
        },
        {
            "goal": "the cost trigger bills no more than the plain trigger, at its provider's prices",
            "met": all(c <= p for *_, c, p in pairs),
            "detail": ", ".join(
                f"{provider} at {size:,}: ${c:.3f} vs ${p:.3f} ({_ratio(c, p)})"
                for size, provider, _, c, p in pairs
            ),
        },
        {
            "goal": "every request of ours carries the current task (every trigger, every window)",
            "met": all(s["task_missing"] == 0 for s in ours_runs),
            "detail": ", ".join(
                f"{s['system']} at {size:,}: {s['task_missing']} of {s['requests']} without it"
                for size, runs in compared.items()
                for s in runs
                if s["system"].startswith("ours")
            ),
        },
    ]


def _result(
    mode: str,
    session: Session,
    window: int,
    systems: list[dict[str, Any]],
    notes: list[str],
    compared: dict[int, list[dict[str, Any]]] | None = None,
    reported: dict[str, Any] | None = None,
) -> dict[str, Any]:
    compared = compared or {}
    ours = systems[0]
    peers = [s for s in systems[1:] if not s.get("variant")]  # the goals' peers
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
    price = prices()
    bill_rows = [
        [
            s["system"],
            s["total_tokens"],
            s["prefix_tokens"],
            f"{s['big_breaks']} / {s['big_break_tokens']:,}",
            f"{s['small_breaks']} / {s['small_break_tokens']:,}",
            f"{s['cached_share']:.0%}",
            f"${s['usd_no_cache_openai']:.3f}",
            f"${s['usd_openai']:.3f}",
            f"${s['usd_anthropic']:.3f}",
            f"${s['usd_openai_gpt5']:.3f}",
            f"${s['usd_anthropic_with_writes']:.3f}",
            s["overflows"],
            s["invalid_pairs"],
        ]
        for s in systems
    ]
    clean = [s for s in systems if s["overflows"] == 0 and s["invalid_pairs"] == 0]

    def cheapest(key: str) -> bool | None:
        if not peers:
            return None
        return ours in clean and all(ours[key] <= p[key] for p in peers)

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
        "cache breaks (of the previous request's tokens, not reused by the next) — "
        + "; ".join(
            f"{s['system']}: {s['big_breaks']} big ({s['big_break_tokens']:,} tokens), "
            f"{s['small_breaks']} small ({s['small_break_tokens']:,})"
            for s in systems
        ),
        "billed input with prompt caching — "
        + "; ".join(
            f"{s['system']}: OpenAI ${s['usd_openai']:.3f} ({s['cached_share']:.0%} cached), "
            f"Anthropic ${s['usd_anthropic']:.3f}, OpenAI gpt-5 ${s['usd_openai_gpt5']:.3f}"
            for s in systems
        ),
    ]
    headline += compare_headline(compared, reported)
    readme = readme_figures(systems, window) + compare_headline(compared, None)
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
        *(
            {
                "goal": f"the lowest {provider} bill with prompt caching, at 0 overflows and 0 "
                "broken pairs",
                "met": cheapest(key),
                "detail": ", ".join(
                    f"{p['system']}/ours = {p[key] / max(1e-12, ours[key]):.2f}×" for p in peers
                )
                or "no peer ran",
            }
            for provider, key in (
                ("OpenAI", "usd_openai"),
                ("Anthropic", "usd_anthropic"),
                ("OpenAI gpt-5", "usd_openai_gpt5"),
            )
        ),
    ]
    goals += compare_goals(compared) if compared else []
    goals += [provider_goal(reported)] if reported else []
    if ours.get("failures"):
        notes.append(f"ours: {len(ours['failures'])} agent call(s) failed: {ours['failures'][:3]}")
    chart = {
        "file": "tokens_sent.png",
        "title": f"Input tokens per request over the replayed session (window {window:,})",
        "x_label": "request",
        "y_label": "input tokens (exact)",
        "x_integer": True,
        "series": {
            **{s["system"]: [[i + 1, t] for i, t in enumerate(s["per_request"])] for s in systems},
            "window": [[1, window], [max(s["requests"] for s in systems), window]],
        },
    }
    prefix_chart = {
        "file": "tokens_sent_prefix.png",
        "title": "Tokens equal to the previous request's prefix (cacheable), per request",
        "x_label": "request",
        "y_label": "tokens in the common prefix",
        "x_integer": True,
        "series": {
            s["system"]: [[i + 1, t] for i, t in enumerate(s["prefix_per_request"])]
            for s in systems
        },
    }
    bill_chart = {
        "file": "tokens_sent_bill.png",
        "title": "Billed input over the replay (USD)",
        "kind": "bar",
        "y_label": "USD",
        "categories": [
            "no cache (OpenAI)",
            "OpenAI cached 0.5×",
            "no cache (Anthropic)",
            "Anthropic cached 0.1×",
            "OpenAI gpt-5 cached 0.1×",
        ],
        "series": {
            s["system"]: [
                s["usd_no_cache_openai"],
                s["usd_openai"],
                s["usd_no_cache_anthropic"],
                s["usd_anthropic"],
                s["usd_openai_gpt5"],
            ]
            for s in systems
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
        "readme": readme,
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
            },
            {
                "title": "The bill with prompt caching",
                "columns": [
                    "system",
                    "total input",
                    "common prefix",
                    "big breaks / tokens",
                    "small breaks / tokens",
                    "cached (OpenAI)",
                    "OpenAI, no cache",
                    "OpenAI",
                    "Anthropic",
                    "Anthropic + writes",
                    "OpenAI gpt-5",
                    "overflows",
                    "invalid pairs",
                ],
                "rows": bill_rows,
                "note": "common prefix: per agent request, the tokens equal to the start of one "
                f"of the {CACHE_ENTRIES} requests before it, agent or summary (tool schemas, "
                "then each message's OpenAI JSON, o200k), summed; summary requests are "
                "measured and billed by the same rule. A break is a request that does not reuse all of the previous one: big "
                f"(≥ {BIG_BREAK:,} tokens of it dropped: compaction, trims, a rewrite near the "
                "front) or small (a tail re-sent: material placed after the history). Prices from litellm's bundled price table "
                f"(model_prices_and_context_window_backup.json, litellm "
                f"{_report.versions()['litellm']}), which follows the providers' pricing pages "
                "(openai.com/api/pricing, anthropic.com/pricing): "
                + "; ".join(
                    f"{k} = {v.model}: ${v.input * 1e6:.2f}/M input, ${v.cached * 1e6:.2f}/M "
                    f"cached ({v.cached / v.input:.1f}×)"
                    + (f", ${v.write * 1e6:.2f}/M cache write" if v.write else "")
                    for k, v in price.items()
                )
                + ". OpenAI: the common prefix from 1,024 tokens, in 128-token steps "
                "(platform.openai.com/docs/guides/prompt-caching); Anthropic: the common prefix "
                "up to the last whole message, from 1,024 tokens (docs.anthropic.com, prompt "
                "caching); 'Anthropic + writes' also bills every uncached agent-request token as a "
                "cache write (1.25×, a breakpoint at the end of each request). Summary requests "
                "are billed like agent requests: ours are asked in place (the agent's own prefix, "
                "then the instruction), LangChain's as one prompt without tools, so only ours can "
                "be read from the cache. Anthropic is billed on o200k counts too, and caches by "
                "explicit breakpoints: the whole-message prefix assumes one at every message "
                "boundary of an earlier request, for every system alike.",
            },
            *compare_tables(compared),
            *([provider_table(reported, session)] if reported else []),
        ],
        "charts": [chart, prefix_chart, bill_chart],
        "notes": notes,
        "data": {
            **{s["system"]: {k: v for k, v in s.items() if k != "system"} for s in systems},
            COMPARED: {
                str(size): {
                    s["system"]: {k: v for k, v in s.items() if k != "system" and k not in SERIES}
                    for s in runs
                }
                for size, runs in compared.items()
            },
            **({PROVIDER_CACHE: reported} if reported else {}),
        },
    }


COMPARED = "compared"
"""The key in ``data`` of the breakpoint and cost-trigger runs: window → system → tally."""


def compare_tables(compared: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Return the tables of the breakpoint and cost-trigger comparisons."""
    if not compared:
        return []
    price = prices()["Anthropic"]
    return [
        {
            "title": "The Anthropic bill with cache breakpoints (ours)",
            "columns": [
                "window",
                "system",
                "cache_control marks",
                "total input",
                "read from cache",
                "written to cache",
                "fresh",
                "Anthropic",
                "vs no marks",
            ],
            "rows": breakpoint_rows(compared),
            "note": "The same requests billed on Sonnet 4.5 prices three ways: without marks "
            "(Anthropic caches only marked prefixes: every token at the input price, "
            f"${price.input * 1e6:.2f}/M), with one mark on each request's newest message, and "
            "with the marks `providers.LiteLLMClient` places (`place_breakpoints`: the last "
            "history message, System, the stable reference message, the last tool). A mark "
            "writes the prefix ending there (from 1,024 tokens) at "
            f"${(price.write or price.input) * 1e6:.2f}/M; a request reads the longest earlier "
            f"entry ending at a mark or up to {LOOKBACK} messages before one at "
            f"${price.cached * 1e6:.2f}/M — the rule of tests/integration/anthropic_server.py, "
            "on whole messages (its blocks). Entries do not expire within the replay.",
        },
        {
            "title": 'Compaction(trigger="cost") beside the plain trigger and the peers',
            "columns": [
                "window",
                "system",
                "requests",
                "summary requests",
                "total input",
                "OpenAI",
                "vs ours",
                "Anthropic, marked",
                "vs ours",
                "marks",
                "overflows",
                "invalid pairs",
                "without the task",
            ],
            "rows": cost_rows(compared),
            "note": "ours: the plain default trigger (75 % of the input limit or 200 messages). "
            'The cost runs use Compaction(trigger="cost", prices=…) at gpt-4o\'s prices '
            "(cached 0.5×, writes free) or Sonnet 4.5's with marks (cached 0.1×, writes 1.25×), "
            "from litellm's table; every other setting is the default stack's. OpenAI: billed "
            "as in the bill table (common prefix from 1,024 tokens in 128-token steps). "
            "Anthropic, marked: our runs with our breakpoints, the peers with one mark on the "
            "newest message (what suits an append-only request), cache reads and writes as in "
            "the breakpoint table. vs ours: the bill over ours at the plain trigger, same "
            "window. Without the task: agent requests that no longer hold the newest user "
            "message of the session word for word.",
        },
    ]


# ------------------------------------------------- provider-reported cached tokens
PROVIDER_SESSIONS = {"full": (80, 3), "quick": (60, 2), "smoke": (30, 1)}
"""Per server style: the messages of each small session, and how many sessions."""
PROVIDER_LIMIT = {"full": 8_192, "quick": 8_192, "smoke": 6_144}
"""The input limit of those sessions: small enough that each one compacts."""
PROVIDER_STYLES = {
    "OpenAI-style": "openai/gpt-4o-mini",
    "Anthropic-style": "anthropic/claude-sonnet-4-5",
}
"""The local caching servers of tests/integration and the litellm model each is reached as."""


@dataclass
class _Recorder:
    """Passes every request to ``inner`` (a `LiteLLMClient`) and keeps it, to bill it too."""

    inner: Any
    requests: list[Any]

    @property
    def model(self) -> str:
        return str(self.inner.model)

    def context_window(self, model: str | None = None) -> int | None:
        return self.inner.context_window(model)  # type: ignore[no-any-return]

    async def complete(self, request: Any) -> Any:
        self.requests.append(request)
        return await self.inner.complete(request)


def _asks_summary(body: dict[str, Any]) -> bool:
    """Whether a request body is compaction's summary request (its last message says so)."""
    messages = body.get("messages") or []
    last = json.dumps(messages[-1], ensure_ascii=False) if messages else ""
    return "being compacted" in last or "summar" in last[:600].lower()


def small_sessions(session: Session, size: int, count: int) -> list[Session]:
    """Return ``count`` slices of ``session`` of about ``size`` messages, each from a user turn."""
    out: list[Session] = []
    start = 0
    messages = session.messages
    while len(out) < count and start < len(messages):
        while start < len(messages) and messages[start].role != "user":
            start += 1
        cut = request_ready(messages[start : start + size], size)
        if len(cut) < 4:
            break
        what = f"messages {start + 1}–{start + len(cut)} of the session"
        out.append(Session(session.name, session.source, what, session.system_prompt, cut, 1))
        start += size
    return out


async def provider_cache(session: Session, mode: Mode, progress: Progress) -> dict[str, Any]:
    """Replay small sessions through litellm to the local caching servers; compare the cache.

    Per style: the cached share of input the server reported, what our manifests expected
    (``cache_expected``), what this benchmark's bill rule computes for the same requests
    (OpenAI: the common prefix from 1,024 tokens in 128-token steps; Anthropic: the marks
    `LiteLLMClient` placed, `marked_cache`), and the manifests' cache verdicts.
    """
    from harness.policy import ContextPolicy
    from harness.sessions.store import ManifestEvent
    from providers import LiteLLMClient
    from tests.integration.anthropic_server import AnthropicReply, AnthropicServer
    from tests.integration.openai_server import OpenAIServer, Reply

    class SummarisingAnthropic(AnthropicServer):
        """The Anthropic-style server, answering summary requests with the fixed summary."""

        def answer(self, body: dict[str, Any]) -> dict[str, Any]:
            if _asks_summary(body):
                self.push(AnthropicReply(text=FIXED_SUMMARY))
            return super().answer(body)

    def openai_answer(body: dict[str, Any]) -> Reply:
        return Reply(text=FIXED_SUMMARY if _asks_summary(body) else "ok")

    size, count = PROVIDER_SESSIONS[mode]
    slices = small_sessions(session, size, count)
    styles: dict[str, dict[str, Any]] = {}
    for style, model in PROVIDER_STYLES.items():
        totals: dict[str, Any] = {
            "sessions": len(slices),
            "requests": 0,
            "summary_requests": 0,
            "reported_input": 0,
            "reported_cached": 0,
            "reported_written": 0,
            "expected_cached": 0,
            "estimated_input": 0,
            "computed_input": 0,
            "computed_cached": 0,
            "computed_written": 0,
            "verdicts": {},
            "failures": [],
        }
        for number, part in enumerate(slices):
            server: Any = (
                OpenAIServer(prefix_cache=True, default=openai_answer)
                if style == "OpenAI-style"
                else SummarisingAnthropic(min_cacheable=ANTHROPIC_MIN_PREFIX)
            )
            with server, tempfile.TemporaryDirectory(prefix="bench-cache-") as workspace:
                url = f"sqlite:///{workspace}/sessions.db"
                litellm_client = LiteLLMClient(
                    model, api_base=server.base_url, api_key="test", context_window=128_000
                )
                recorder = _Recorder(litellm_client, [])
                client = ReplayClient(recorder, part.messages)  # type: ignore[arg-type]
                stack = our_stack()
                agent = HarnessAgent(
                    model=client,
                    system_prompt=part.system_prompt,
                    tools=replay_tools(part.messages, skip=stack_tool_names(stack)),
                    stack=stack,
                    policy=ContextPolicy(max_input_tokens=PROVIDER_LIMIT[mode]),
                    store=url,
                    workspace=workspace,
                    max_rounds=10_000,
                )
                ctx = RuntimeContext(user_id="bench", session_id=f"cache-{number}")
                outcome = await replay(agent, part, ctx, client)
                assert agent.store is not None
                key = agent.key(ctx)
                log = [e.event for e in await agent.store.events(key, limit=100_000)]
                await agent.store.aclose()
            totals["failures"] += outcome.failures
            manifests = [e.manifest for e in log if isinstance(e, ManifestEvent)]
            for m in manifests:
                if m.usage is None:
                    continue
                totals["reported_input"] += m.usage.prompt_tokens
                totals["reported_cached"] += m.usage.cached_tokens
                totals["reported_written"] += m.usage.cache_write_tokens
                if m.purpose != "agent":
                    totals["summary_requests"] += 1
                    continue
                totals["requests"] += 1
                totals["expected_cached"] += m.cache_expected or 0
                totals["estimated_input"] += m.estimated_input_tokens
                verdict = str(m.cache_verdict)
                totals["verdicts"][verdict] = totals["verdicts"].get(verdict, 0) + 1
            _computed(totals, recorder.requests, anthropic=style != "OpenAI-style")
        styles[style] = totals
        progress(
            f"{style}: {totals['requests']} requests, reported cached "
            f"{_share(totals['reported_cached'], totals['reported_input'])}, computed "
            f"{_share(totals['computed_cached'], totals['computed_input'])}"
        )
    return {
        "sessions": [s.description for s in slices],
        "input_limit": PROVIDER_LIMIT[mode],
        "styles": styles,
    }


def _computed(totals: dict[str, Any], requests: Sequence[Any], *, anthropic: bool) -> None:
    """Add the bill rule's cached (and, for Anthropic, written) tokens of ``requests``."""
    exact = estimator_for("gpt-4o", exact=True)
    meter: PrefixMeter | None = None
    marks: list[list[int]] = []
    for request in requests:
        rendered = request.render()
        tools = bool(request.tools)
        if meter is None:
            meter = PrefixMeter(exact.count_tools(request.tools) if tools else 0)
        counter = Counter(meter.tool_tokens)
        kind = "summary" if request.ids.purpose == "summary" else "agent"
        meter.add(rendered, counter.request(rendered, tools=tools), kind=kind, tools=tools)
        marks.append(breakpoints_of(rendered, tools=len(request.tools)))
    if meter is None:
        return
    totals["computed_input"] += sum(meter.tokens)
    if anthropic:
        reads, writes = marked_cache(meter, marks)
        totals["computed_cached"] += sum(reads)
        totals["computed_written"] += sum(writes)
    else:
        totals["computed_cached"] += sum(
            0 if p < OPENAI_MIN_PREFIX else min(t, p // OPENAI_STEP * OPENAI_STEP)
            for t, p in zip(meter.tokens, meter.prefix, strict=True)
        )


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "–"


PROVIDER_CACHE = "provider_cache"
"""The key in ``data`` of the provider-reported cache figures (`provider_cache`)."""
AGREEMENT_POINTS = 3.0
"""The bill rule agrees with a server when their cached shares of input differ by less."""


def provider_rows(reported: dict[str, Any]) -> list[list[Any]]:
    """Return one row per server style: reported, expected and computed cached shares."""
    rows = []
    for style, t in reported["styles"].items():
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(t["verdicts"].items()))
        rows.append(
            [
                style,
                t["sessions"],
                t["requests"],
                t["summary_requests"],
                _share(t["reported_cached"], t["reported_input"]),
                _share(t["expected_cached"], t["estimated_input"]),
                _share(t["computed_cached"], t["computed_input"]),
                _share(t["reported_written"], t["reported_input"]),
                _share(t["computed_written"], t["computed_input"]),
                verdicts,
            ]
        )
    return rows


def provider_table(reported: dict[str, Any], session: Session) -> dict[str, Any]:
    """Return the table of provider-reported against computed cached tokens."""
    size = next(iter(reported["styles"].values()))["sessions"]
    return {
        "title": "Cached input: reported by the provider vs computed",
        "columns": [
            "server",
            "sessions",
            "agent requests",
            "summary requests",
            "cached, reported",
            "cached, our manifests expected",
            "cached, the bill rule",
            "written, reported",
            "written, the bill rule",
            "cache verdicts (agent requests)",
        ],
        "rows": provider_rows(reported),
        "note": f"{size} small session(s) ({'; '.join(reported['sessions'])}) of {session.name}, "
        "each replayed through our default stack (input limit "
        f"{reported['input_limit']:,}, so that each compacts) and litellm to the local caching servers "
        "of tests/integration: openai_server.py with its automatic prefix cache (cached "
        "tokens in 128-token blocks from 1,024, as prompt_tokens_details.cached_tokens) as "
        f"{PROVIDER_STYLES['OpenAI-style']}, and anthropic_server.py (caches only marked "
        "prefixes from 1,024 tokens, reads up to 20 blocks back, as cache_read_input_tokens "
        f"and cache_creation_input_tokens) as {PROVIDER_STYLES['Anthropic-style']}, with the "
        "marks LiteLLMClient places. Shares of all input, agent and summary requests: "
        "reported by the server (its own count of its own wire format); what our manifests "
        "expected (cache_expected over the estimate, agent requests); what this benchmark's "
        "bill rule computes for the same requests (the rule the bill tables use). Verdicts: "
        "the manifests' cache_verdict once the server answered.",
    }


def provider_goal(reported: dict[str, Any]) -> dict[str, Any]:
    """Return the goal: the bill rule's cached share is the one the servers report."""
    gaps = {
        style: 100
        * abs(
            t["reported_cached"] / max(1, t["reported_input"])
            - t["computed_cached"] / max(1, t["computed_input"])
        )
        for style, t in reported["styles"].items()
    }
    clean = all(not t["failures"] and t["requests"] > 0 for t in reported["styles"].values())
    return {
        "goal": f"the bill rule's cached share within {AGREEMENT_POINTS:g} points of what the "
        "caching servers report",
        "met": clean and all(g < AGREEMENT_POINTS for g in gaps.values()),
        "detail": ", ".join(f"{style}: {gap:.1f} points apart" for style, gap in gaps.items()),
    }


def compare_headline(
    compared: dict[int, list[dict[str, Any]]], reported: dict[str, Any] | None
) -> list[str]:
    """Return the one-line figures of the breakpoint, cost-trigger and provider sections."""
    lines = []
    if compared:
        lines.append(
            "Anthropic bill of ours with cache breakpoints vs without marks — "
            + "; ".join(
                f"{size:,}: ${runs[0]['usd_anthropic_breakpoints']:.3f} vs "
                f"${runs[0]['usd_no_cache_anthropic']:.3f} "
                f"({_ratio(runs[0]['usd_anthropic_breakpoints'], runs[0]['usd_no_cache_anthropic'])})"
                for size, runs in compared.items()
            )
        )
        parts = []
        for size, runs in compared.items():
            by = {s.get("priced_as"): s for s in runs}
            o, a = by.get("OpenAI"), by.get("Anthropic")
            if o is None or a is None:
                continue
            parts.append(
                f"{size:,}: OpenAI ${o['usd_openai']:.3f} "
                f"({_ratio(o['usd_openai'], runs[0]['usd_openai'])}), Anthropic "
                f"${a['usd_anthropic_marked']:.3f} "
                f"({_ratio(a['usd_anthropic_marked'], runs[0]['usd_anthropic_marked'])})"
            )
        lines.append('Compaction(trigger="cost") vs our plain trigger — ' + "; ".join(parts))
    if reported:
        lines.append(
            "cached share of input, reported by the local caching servers vs the bill rule — "
            + "; ".join(
                f"{style}: {_share(t['reported_cached'], t['reported_input'])} vs "
                f"{_share(t['computed_cached'], t['computed_input'])}"
                for style, t in reported["styles"].items()
            )
        )
    return lines
