"""The summariser side of Compaction: prompts, rendering, chunk packing and the requests.

Summary requests go straight to the summariser model, never through the stack (they load
no dynamic sources and show no task state), and each one reports its own manifest
(purpose ``summary``) like the agent's requests do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import anyio
import msgspec

from harness.accounting import build_manifest, counted_near_limit, report_manifest, sure_count
from harness.errors import ConfigurationError, ContextOverflowError, ProviderError
from harness.messages import Message, new_id
from harness.request import ModelClientLike, ModelRequest
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator, estimator_for
from middleware._layout import SUMMARY_ROOM

DEFAULT_SUMMARY_PROMPT: Final = """\
You are compacting the conversation of an AI agent so that it can continue its task with \
less context. The agent will see your summary in place of the messages below, followed by \
the most recent messages, which are kept word for word.
{previous_summary}
Write a concise summary in Markdown with exactly these sections:

## Session goal
What the user asked for, with every constraint and preference they stated.
## Key conclusions
What was found, decided or ruled out, with the evidence that matters (errors, test results).
## Files and artefacts
Files read, created or changed, commands run and other artefacts, each with its role.
## Next steps
What remains to be done or verified.

Keep identifiers, paths, names and numbers exact. Do not add anything that is not in the \
messages.

<messages>
{messages}
</messages>"""
"""The default summary prompt: goal, key conclusions, files and artefacts, next steps."""

UPDATE_PREAMBLE: Final = """
Here is the previous summary of the earlier conversation. Update it with the messages \
below: keep what still holds, correct what changed, add what is new.
<previous_summary>
{summary}
</previous_summary>
"""
"""Put in ``{previous_summary}`` (or before a custom prompt) when a summary exists."""

MERGE_PROMPT: Final = """\
The texts below summarise consecutive parts of one AI agent's conversation, oldest first. \
Merge them into one concise summary with the sections ## Session goal, ## Key conclusions, \
## Files and artefacts and ## Next steps. Where parts disagree the later one wins. Keep \
identifiers, paths, names and numbers exact.

{summaries}"""
"""The prompt that merges the partial summaries of a chunked summarisation."""

SUMMARY_HEADER: Final = "[Summary of the earlier conversation"
"""How a summary message's text starts (followed by the count and a blank line)."""

CHUNK_FRACTION: Final = 0.6
"""The share of the summariser's input limit one summary request uses by default."""
SUMMARY_OVERFLOW_RETRIES: Final = 3
"""Times the chunks are halved when the summariser rejects a summary request as too long."""
HEADER_TOKENS: Final = 32
"""Room for a summary message's header line ("[Summary of … compacted; …]")."""
MIN_TEXT_TOKENS: Final = SUMMARY_ROOM - MESSAGE_OVERHEAD - HEADER_TOKENS
"""The least text a summary gets (what `SUMMARY_ROOM` leaves after its header)."""
_PLACEHOLDER = re.compile(r"\{(messages|previous_summary)\}")

SUMMARY_CONCURRENCY: Final = 4
"""Partial summaries requested at once when the early part is summarised in chunks."""


class Summariser:
    """Sends summary requests straight to the summariser (not through the stack)."""

    def __init__(
        self, client: ModelClientLike, request: ModelRequest, limit: int, est: TokenEstimator
    ) -> None:
        self.client = client
        self.request = request
        self.limit = limit
        self.est = est
        self.overflowed_at: int | None = None
        """The estimated size of the last summary request the summariser rejected as too long."""

    async def __call__(self, prompt: str) -> str:
        source = self.request
        request = ModelRequest(
            model=self.client.model,
            ids=msgspec.structs.replace(source.ids, purpose="summary", call_id=new_id()),
            history=(Message.user(prompt),),
            policy=source.policy.replace(estimator=self.est),
            input_limit=self.limit,
        )
        request, tokens = counted_near_limit(request)  # exact near the summariser's limit
        if tokens > self.limit:
            # Chunks are packed on estimates; one that is over by exact count is not sent:
            # the caller halves the chunks as it does for a provider overflow.
            self.overflowed_at = tokens
            raise ContextOverflowError(
                f"a summary request counted {tokens:,} tokens against the summariser's input "
                f"limit of {self.limit:,}; it was not sent",
                reason="summary_over_limit",
            )
        report_manifest(build_manifest(request), self.request)
        try:
            response = await self.client.complete(request)
        except ContextOverflowError:
            self.overflowed_at = tokens
            raise
        return response.message.text.strip()

    async def many(self, prompts: list[str]) -> list[str]:
        """Return the answers to ``prompts``, a few requests at a time, in order.

        Raises:
            ProviderError: the first provider failure, as it was raised (not in a group).
        """
        results = [""] * len(prompts)
        failures: list[ProviderError] = []  # raised as they are, not wrapped in a group
        limiter = anyio.CapacityLimiter(SUMMARY_CONCURRENCY)

        async with anyio.create_task_group() as tg:

            async def one(i: int) -> None:
                async with limiter:
                    try:
                        results[i] = await self(prompts[i])
                    except ProviderError as exc:
                        failures.append(exc)
                        tg.cancel_scope.cancel()

            for i in range(len(prompts)):
                tg.start_soon(one, i)
        if failures:
            raise failures[0]
        return results


def summary_text(message: Message) -> str:
    """Return the summary itself, without the header line a summary message starts with."""
    text = message.text
    if text.startswith(SUMMARY_HEADER):
        return text.partition("\n\n")[2]
    return text


def render_message(message: Message) -> str:
    """Render one message as plain text for the summariser."""
    if message.role == "tool":
        label = f"tool result {message.name}" if message.name else "tool result"
    else:
        label = message.role
    text = message.text
    lines = [f"[{label}] {text}" if text else f"[{label}]"]
    lines.extend(f"[tool call {c.name}] {c.arguments}" for c in message.tool_calls)
    return "\n".join(lines)


def fit_text(text: str, est: TokenEstimator, tokens: int) -> str:
    """Return ``text``, cut in the middle (head and tail kept) to at most ``tokens`` tokens.

    Counted exactly when the estimate comes near ``tokens`` (`harness.accounting.sure_count`).
    """
    size = sure_count(text, est, tokens)
    if size <= tokens:
        return text
    if tokens <= 0:
        return ""
    marker = "\n[… cut to fit the summary request …]\n"
    chars = len(text)
    while size > tokens and chars > 0:
        chars = int(chars * min(0.9, tokens / size))
        head = chars * 2 // 3
        tail = chars - head
        cut = text[:head] + marker + (text[len(text) - tail :] if tail else "")
        size = sure_count(cut, est, tokens)
    return cut if chars > 0 else ""


def pack(pieces: list[str], est: TokenEstimator, room: int) -> list[str]:
    """Join ``pieces`` into as few texts of at most ``room`` tokens as they fit in, in order."""
    chunks: list[str] = []
    current: list[str] = []
    used = 0
    for piece in pieces:
        piece = fit_text(piece, est, room - 1)
        tokens = sure_count(piece, est, room) + 1  # the joining newlines
        if current and used + tokens > room:
            chunks.append("\n\n".join(current))
            current, used = [], 0
        current.append(piece)
        used += tokens
    if current:
        chunks.append("\n\n".join(current))
    return chunks


class SummaryWriter:
    """Writes one summary of early messages: chunked to fit the summariser, merged, cut.

    Args:
        model: the summariser (``None``: the calling agent's client, ``request.run.client``).
        prompt: the summary prompt (with ``{messages}``; see `DEFAULT_SUMMARY_PROMPT`).
        chunk_tokens: the most tokens one summary request may hold (``None``: 60 % of the
            summariser's input limit).
    """

    def __init__(
        self, *, model: ModelClientLike | None, prompt: str, chunk_tokens: int | None
    ) -> None:
        self.model = model
        self.prompt = prompt
        self.chunk_tokens = chunk_tokens

    async def summarise(
        self, early: Sequence[Message], previous: str | None, request: ModelRequest, cap: int
    ) -> str:
        """Return a summary of ``early`` (updating ``previous``), chunked to fit the summariser."""
        client = self.model or (request.run.client if request.run is not None else None)
        if client is None:
            raise ConfigurationError(
                "Compaction needs a summariser: pass Compaction(model=...) or run it inside "
                "HarnessAgent, whose client is the default",
                transforms=request.transforms,
            )
        est = request.estimator if client.model == request.model else estimator_for(client.model)
        limit = request.policy.input_limit(client.context_window(client.model))
        chunk = min(self.chunk_tokens or int(limit * CHUNK_FRACTION), limit)
        ask = Summariser(client, request, limit, est)
        for attempt in range(SUMMARY_OVERFLOW_RETRIES + 1):
            try:
                text = await self._summarise_chunked(early, previous, request, ask, chunk)
                break
            except ContextOverflowError:
                # The summariser's real window is smaller than it said (or a chunk was over
                # by exact count): halve the chunks while they still hold messages.
                failed = ask.overflowed_at
                smaller = min(chunk, failed) // 2 if failed is not None else 0
                if attempt == SUMMARY_OVERFLOW_RETRIES or smaller < self._least_chunk(ask):
                    raise
                chunk = smaller
        return fit_text(text.strip(), est, cap)

    def _least_chunk(self, ask: Summariser) -> int:
        """Return the smallest chunk that leaves ``MIN_TEXT_TOKENS`` for messages after the prompt."""
        return MESSAGE_OVERHEAD + 3 + ask.est.count(self._prompt("", None)) + MIN_TEXT_TOKENS

    async def _summarise_chunked(
        self,
        early: Sequence[Message],
        previous: str | None,
        request: ModelRequest,
        ask: Summariser,
        chunk: int,
    ) -> str:
        est = ask.est
        frame = MESSAGE_OVERHEAD + 3  # one user message plus reply priming
        if previous is not None:
            previous = fit_text(previous, est, chunk // 3)
        room = chunk - frame - est.count(self._prompt("", previous))
        if room < MIN_TEXT_TOKENS:
            if ask.overflowed_at is not None:  # the chunk was halved after overflows
                raise ContextOverflowError(
                    f"the summariser rejected summary requests down to {chunk:,} tokens, too "
                    "small to hold messages after the summary prompt; give Compaction a "
                    "summariser with a larger window (Compaction(model=...))",
                    reason="summary_overflow",
                )
            raise ConfigurationError(
                f"summary_chunk_tokens ({chunk}) leaves no room for messages after the summary "
                "prompt; raise summary_chunk_tokens or shorten summary_prompt",
                transforms=request.transforms,
            )
        chunks = pack([render_message(m) for m in early], est, room)
        if len(chunks) == 1:
            return await ask(self._prompt(chunks[0], previous))
        partials = await ask.many([self._prompt(c, None) for c in chunks])
        return await self._merge(
            ([previous] if previous else []) + partials, ask, est, chunk - frame
        )

    async def _merge(
        self, parts: list[str], ask: Summariser, est: TokenEstimator, chunk: int
    ) -> str:
        """Merge partial summaries, in as many rounds of chunked requests as needed."""
        room = chunk - est.count(MERGE_PROMPT)
        while len(parts) > 1:
            # Each part takes at most half the room, so every request merges at least two.
            parts = [fit_text(p, est, room // 2 - 8) for p in parts]
            groups = pack(
                [f'<summary part="{i + 1}">\n{p}\n</summary>' for i, p in enumerate(parts)],
                est,
                room,
            )
            if len(groups) == 1:
                return await ask(MERGE_PROMPT.replace("{summaries}", groups[0]))
            prompts = [MERGE_PROMPT.replace("{summaries}", g) for g in groups]
            parts = await ask.many(prompts)
        return parts[0]

    def _prompt(self, messages: str, previous: str | None) -> str:
        preamble = UPDATE_PREAMBLE.replace("{summary}", previous) if previous is not None else ""
        prompt = self.prompt
        if preamble and "{previous_summary}" not in prompt:
            prompt = preamble.lstrip("\n") + "\n" + prompt
            preamble = ""
        values = {"messages": messages, "previous_summary": preamble}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], prompt)
