"""The summariser side of Compaction: prompts, rendering, chunk packing and the requests.

Summary requests go straight to the summariser model, never through the stack (they load
no dynamic sources and show no task state), and each one reports its own manifest
(purpose ``summary``) like the agent's requests do.

Cost: a long early part is packed into chunks by the fast estimate alone (never the exact
tokenizer per message, which made the first compaction of a long history seconds slower);
the default chunk stays below the estimator's ``floor`` × the summariser's limit, so by the
floor's guarantee no request can be over it, and any request near the limit is recounted
exactly as a whole before it is sent. Each message goes into one request; what was
answered is never asked again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import anyio
import msgspec

from harness.accounting import (
    acounted_near_limit,
    build_manifest,
    ceiling_of,
    count_off_loop,
    exact_counter_of,
    floor_of,
    report_manifest,
    sure_count,
)
from harness.chain import send_watched
from harness.errors import (
    ConfigurationError,
    ContextBudgetExceeded,
    ContextOverflowError,
    ProviderError,
)
from harness.events import usage_event
from harness.messages import ContentPart, Message, new_id
from harness.policy import ContextPolicy
from harness.presend import checked, output_limit
from harness.request import ModelRequest
from harness.tokens import MESSAGE_OVERHEAD, TokenEstimator, estimator_for
from harness.types import ModelClient
from middleware._layout import SUMMARY_ROOM

SUMMARY_SECTIONS: Final = """\
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
"""
"""What every summary must hold, asked alike by the transcript and the in-place summariser;
it ends mid-sentence, on what the summary must stay within (the messages, the conversation)."""

DEFAULT_SUMMARY_PROMPT: Final = (
    """\
You are compacting the conversation of an AI agent so that it can continue its task with \
less context. The agent will see your summary in place of the messages below, followed by \
the most recent messages, which are kept word for word.
{previous_summary}
"""
    + SUMMARY_SECTIONS
    + """messages.

<messages>
{messages}
</messages>"""
)
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
HEADER_TOKENS: Final = 32
"""Room for a summary message's header line ("[Summary of … compacted; …]")."""
MIN_TEXT_TOKENS: Final = SUMMARY_ROOM - MESSAGE_OVERHEAD - HEADER_TOKENS
"""The least text a summary gets (what `SUMMARY_ROOM` leaves after its header)."""
_PLACEHOLDER = re.compile(r"\{(messages|previous_summary)\}")

LABEL_TOKENS: Final = 4
"""Tokens a rendered message's ``[role]`` label may take beyond its own count."""
SUMMARY_CONCURRENCY: Final = 4
"""Partial summaries requested at once when the early part is summarised in chunks."""
OUTPUT_SLACK: Final = 256
"""Output tokens asked for beyond the summary's cap (the answer is cut to the cap anyway)."""


def summary_output(client: ModelClient, cap: int, policy: ContextPolicy) -> int:
    """Return the ``max_tokens`` of a summary request whose answer is cut to ``cap`` tokens.

    ``cap`` + `OUTPUT_SLACK`, at most the policy's output reserve (`ContextPolicy.output_reserve`: the
    room an agent request keeps for its answer, so a summary request asked in place fits
    where the agent's request did), the model's output limit (when the client reports one)
    and half of what the window leaves after the policy's safety margin (`ContextPolicy.margin`). The request's input
    limit is computed with this reserve, so prompt + ``max_tokens`` stays within the window.
    """
    window = client.context_window(client.model)
    output = min(cap + OUTPUT_SLACK, policy.output_reserve(window) or cap + OUTPUT_SLACK)
    most = output_limit(client, client.model)
    if most is not None:
        output = min(output, most)
    if window is not None and window > 0:
        output = min(output, (window - policy.margin(window)) // 2)
    return max(1, output)


class Summariser:
    """Sends summary requests straight to the summariser (not through the stack)."""

    def __init__(
        self,
        client: ModelClient,
        request: ModelRequest,
        limit: int,
        est: TokenEstimator,
        output: int | None = None,
    ) -> None:
        self.client = client
        self.request = request
        self.limit = limit
        self.est = est
        self.output = output
        """The ``max_tokens`` each request asks for (``limit`` reserved it), or ``None``."""

    async def __call__(self, prompt: str) -> str:
        """Return the answer to ``prompt``.

        Raises:
            ContextOverflowError: when the request is over the summariser's limit (by exact
                count: then it is not sent) or the summariser rejects it as too long.
        """
        answer = await self.attempt(prompt)
        if isinstance(answer, int):
            raise ContextOverflowError(
                f"a summary request of {answer:,} tokens was too long for the summariser "
                f"(input limit {self.limit:,}); give Compaction a summariser with a larger "
                "window (Compaction(model=...))",
                reason="summary_over_limit",
            )
        return answer

    async def attempt(self, prompt: str) -> str | int:
        """Return the answer to ``prompt``, or the request's size when it was too long.

        The request is counted exactly only near the summariser's limit (one count of the
        whole request, never of each message); one that is over by exact count is not sent.
        Where its ceiling (UTF-8 bytes) is over the limit, it is counted exactly at once, in
        a worker thread, without estimating it first: a chunk is packed to 60 % of the limit
        by estimate, so its bytes are over it and the exact count always follows — the
        estimate of a 260 KB prompt cost as much again (8-10 ms each, 42 of them at 10,000
        messages).
        """
        source = self.request
        message = Message.user(prompt)
        est = self.est
        ceiling = ceiling_of(est)
        exact = exact_counter_of(est)
        if ceiling is not None and exact is not None and ceiling.count(prompt) > self.limit:
            await anyio.to_thread.run_sync(exact.count_message, message)
            est = exact  # every later count of this request looks the exact one up
        request = ModelRequest(
            model=self.client.model,
            ids=msgspec.structs.replace(source.ids, purpose="summary", call_id=new_id()),
            history=(message,),
            settings={"max_tokens": self.output} if self.output is not None else None,
            policy=source.policy.replace(estimator=est),
            input_limit=self.limit,
        )
        request, tokens = await acounted_near_limit(request)  # exact near its limit, off the loop
        if tokens > self.limit:
            return tokens
        answer = await send_summary_request(self.client, request, self.request)
        return tokens if answer is None else answer

    async def many(self, prompts: list[str]) -> list[str | int]:
        """Return the answers to ``prompts`` (or the sizes of those too long), in order.

        A few requests run at a time; one that is too long does not stop the others, so
        what was summarised is never asked again.

        Raises:
            ProviderError: the first other provider failure, as it was raised (not in a group).
        """
        results: list[str | int] = [""] * len(prompts)
        failures: list[ProviderError] = []  # raised as they are, not wrapped in a group
        limiter = anyio.CapacityLimiter(SUMMARY_CONCURRENCY)

        async with anyio.create_task_group() as tg:

            async def one(i: int) -> None:
                async with limiter:
                    try:
                        results[i] = await self.attempt(prompts[i])
                    except ProviderError as exc:
                        failures.append(exc)
                        tg.cancel_scope.cancel()

            for i in range(len(prompts)):
                tg.start_soon(one, i)
        if failures:
            raise failures[0]
        return results


async def send_summary_request(
    client: ModelClient, request: ModelRequest, source: ModelRequest
) -> str | None:
    """Send a counted summary request straight to ``client``; return its answer's text.

    It passes the pre-send check every request passes (`harness.presend.checked`): its
    pairs are repaired (it is our own request: a dangling call gets an "interrupted"
    result, an orphan result is dropped, never sent broken), ``max_tokens`` is kept within
    the model's output limit, and prompt + ``max_tokens`` within the window. Its manifest
    is reported through ``source`` (the agent request being compacted). ``None`` when the
    request is over budget (it is not sent: the caller asks for less) or the summariser
    rejects it as too long.
    """
    await count_off_loop(request)  # big texts counted in a thread: the check then looks them up
    try:
        request = checked(request, client, pairs="repair")
    except ContextBudgetExceeded:
        return None
    report_manifest(build_manifest(request), source)
    try:
        response = await send_watched(client, request)
    except ContextOverflowError:
        return None
    run = source.run
    event = usage_event(
        response.usage,
        call_id=request.ids.call_id,
        purpose=request.ids.purpose,
        model=response.model or request.model,
    )
    if event is not None and run is not None and run.emit is not None:
        run.emit(event)  # the summary request's bill, in the session's record
    return response.message.text.strip()


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
    if not isinstance(message.content, str) and message.content is not None:
        lines.extend(_media(part) for part in message.content if part.text is None)
    lines.extend(f"[tool call {c.name}] {c.arguments}" for c in message.tool_calls)
    return "\n".join(lines)


def _media(part: ContentPart) -> str:
    """Name a non-text part in a transcript: its URL, so the summary can keep it (never inline data)."""
    found = (part.data or {}).get(part.type)
    url = found.get("url") if isinstance(found, dict) else found
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return f"[{part.type}] {url}"
    return f"[{part.type}: inline data, not shown]"


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


def pack(
    pieces: Sequence[str], est: TokenEstimator, room: int, sizes: Sequence[int] | None = None
) -> list[list[str]]:
    """Group ``pieces``, in order, into as few groups of at most ``room`` tokens as they fit in.

    Counted with the fast estimate only (no exact tokenizer pass per piece): the summary
    request is recounted as a whole near the summariser's limit (`Summariser.attempt`). A
    piece larger than ``room`` is cut to fit (`fit_text`) and goes alone.

    Args:
        pieces: the texts, in order.
        est: the (fast) estimator.
        room: the most tokens of one group.
        sizes: each piece's tokens when known already (`rendered_tokens`); else counted.
    """
    groups: list[list[str]] = []
    current: list[str] = []
    used = 0
    count = est.count
    for index, piece in enumerate(pieces):
        tokens = (sizes[index] if sizes is not None else count(piece)) + 1  # joining newlines
        if tokens > room:
            piece, tokens = fit_text(piece, est, room - 1), room
        if current and used + tokens > room:
            groups.append(current)
            current, used = [], 0
        current.append(piece)
        used += tokens
    if current:
        groups.append(current)
    return groups


def rendered_tokens(message: Message, est: TokenEstimator) -> int:
    """Return at least the estimated tokens of `render_message` (message), from cached counts.

    The message's own count (cached by the estimator, usually counted already this round)
    covers its text and tool calls with more framing than the rendering adds, plus the label:
    no second pass over the text of a long early part.
    """
    label = f"tool result {message.name}" if message.role == "tool" and message.name else ""
    return est.count_message(message) + LABEL_TOKENS + (est.count(label) if label else 0)


def packing_estimator(est: TokenEstimator, model: str) -> TokenEstimator:
    """Return the estimator summary chunks are packed with: ``est``, or its fast form when exact.

    A request near its limit carries the exact estimator (`counted_near_limit`); packing
    a long early part with it would run the tokenizer over every message. The fast estimate
    is safe to pack with: its ``floor`` bounds how far it may under-count, and the default
    chunk stays below ``floor`` × the limit.
    """
    return estimator_for(model) if est.exact else est


class SummaryWriter:
    """Writes one summary of early messages: chunked to fit the summariser, merged, cut.

    Each early message is sent in exactly one summary request: the chunks are summarised
    once each (a chunk the summariser rejects as too long is split and only its parts are
    asked again), then only the partial summaries are merged.

    Args:
        model: the summariser (``None``: the calling agent's client, ``request.run.client``).
        prompt: the summary prompt (with ``{messages}``; see `DEFAULT_SUMMARY_PROMPT`).
        chunk_tokens: the most tokens one summary request may hold, by estimate (``None``:
            60 % of the summariser's input limit, and at most the estimator's ``floor`` of it,
            so that no request needs an exact recount).
    """

    def __init__(self, *, model: ModelClient | None, prompt: str, chunk_tokens: int | None) -> None:
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
        est = packing_estimator(est, client.model)
        output = summary_output(client, cap, request.policy)
        limit = request.policy.input_limit(client.context_window(client.model), max_output=output)
        fraction = min(CHUNK_FRACTION, floor_of(est))
        ask = Summariser(client, request, limit, est, output)
        if self.chunk_tokens is None:  # the default: 60 %, never less than a prompt can use
            chunk = min(max(int(limit * fraction) - 1, self._least_chunk(ask)), limit)
        else:
            chunk = min(self.chunk_tokens, limit)
        merged: list[str] = []  # a previous summary too long to ask beside messages
        if previous is not None:
            # A third of the chunk, and never so much that no messages fit beside it.
            frame = MESSAGE_OVERHEAD + 3 + est.count(self._prompt("", "")) + MIN_TEXT_TOKENS
            room = min(chunk // 3, chunk - frame)
            if room >= MIN_TEXT_TOKENS:
                previous = fit_text(previous, est, room)
            else:  # a small window: summarise without it, then merge it with the new part
                merged, previous = [fit_text(previous, est, chunk // 3)], None
        pieces = [render_message(m) for m in early]
        sizes = [rendered_tokens(m, est) for m in early]
        groups = pack(pieces, est, self._room(chunk, previous, ask, request), sizes)
        if len(groups) == 1 and not merged:
            answer = await ask.attempt(self._prompt(_join(groups[0]), previous))
            if isinstance(answer, str):
                return fit_text(answer, est, cap)
            chunk = self._smaller(chunk, answer, ask)
            groups = pack(pieces, est, self._room(chunk, None, ask, request), sizes)
        partials = await self._partials(groups, ask, chunk, request)
        text = await self._merge(merged + ([previous] if previous else []) + partials, ask, chunk)
        return fit_text(text.strip(), est, cap)

    async def _partials(
        self, groups: list[list[str]], ask: Summariser, chunk: int, request: ModelRequest
    ) -> list[str]:
        """Return one partial summary per group, splitting only the groups that were too long."""
        answers = await ask.many([self._prompt(_join(g), None) for g in groups])
        partials: list[str] = []
        for group, answer in zip(groups, answers, strict=True):
            if isinstance(answer, str):
                partials.append(answer)
                continue
            smaller = self._smaller(chunk, answer, ask)
            parts = pack(group, ask.est, self._room(smaller, None, ask, request))
            partials.extend(await self._partials(parts, ask, smaller, request))
        return partials

    def _smaller(self, chunk: int, rejected: int, ask: Summariser) -> int:
        """Return the chunk size after a request of ``rejected`` tokens was too long.

        Raises:
            ContextOverflowError: when halving again would leave no room for messages.
        """
        smaller = min(chunk, rejected) // 2
        if smaller < self._least_chunk(ask):
            raise ContextOverflowError(
                f"the summariser rejected summary requests down to {rejected:,} tokens; "
                "halving them again leaves no room for messages after the summary prompt: give "
                "Compaction a summariser with a larger window (Compaction(model=...))",
                reason="summary_overflow",
            )
        return smaller

    def _least_chunk(self, ask: Summariser) -> int:
        """Return the smallest chunk that leaves ``MIN_TEXT_TOKENS`` for messages after the prompt."""
        return MESSAGE_OVERHEAD + 3 + ask.est.count(self._prompt("", None)) + MIN_TEXT_TOKENS

    def _room(
        self, chunk: int, previous: str | None, ask: Summariser, request: ModelRequest
    ) -> int:
        """Return the tokens of messages one summary request of ``chunk`` tokens can hold.

        Raises:
            ConfigurationError: when ``chunk`` leaves no room for messages after the prompt.
        """
        frame = MESSAGE_OVERHEAD + 3  # one user message plus reply priming
        room = chunk - frame - ask.est.count(self._prompt("", previous))
        if room < MIN_TEXT_TOKENS and self.chunk_tokens is not None and chunk == self.chunk_tokens:
            raise ConfigurationError(
                f"summary_chunk_tokens ({chunk}) leaves no room for messages after the summary "
                "prompt; raise summary_chunk_tokens or shorten summary_prompt",
                transforms=request.transforms,
            )
        if room < MIN_TEXT_TOKENS:
            raise ConfigurationError(
                f"the summariser {ask.client.model!r} takes at most {ask.limit:,} input tokens "
                f"per summary request, too few for the summary prompt and {MIN_TEXT_TOKENS} "
                "tokens of messages; give Compaction a summariser with a larger window "
                "(Compaction(model=...)) or a shorter summary_prompt",
                transforms=request.transforms,
            )
        return room

    async def _merge(self, parts: list[str], ask: Summariser, chunk: int) -> str:
        """Merge partial summaries, in as many rounds of chunked requests as needed.

        Only summaries are sent here, never the messages; a merge request the summariser
        rejects as too long is asked again in smaller groups.
        """
        est = ask.est
        while len(parts) > 1:
            room = chunk - MESSAGE_OVERHEAD - 3 - est.count(MERGE_PROMPT)
            # Each part takes at most half the room, so every request merges at least two.
            parts = [fit_text(p, est, room // 2 - 8) for p in parts]
            groups = pack(
                [f'<summary part="{i + 1}">\n{p}\n</summary>' for i, p in enumerate(parts)],
                est,
                room,
            )
            answers = await ask.many(
                [MERGE_PROMPT.replace("{summaries}", _join(g)) for g in groups]
            )
            rejected = [a for a in answers if isinstance(a, int)]
            if rejected:
                chunk = self._smaller(chunk, min(rejected), ask)
                continue
            parts = [a for a in answers if isinstance(a, str)]
        return parts[0]

    def _prompt(self, messages: str, previous: str | None) -> str:
        preamble = UPDATE_PREAMBLE.replace("{summary}", previous) if previous is not None else ""
        prompt = self.prompt
        if preamble and "{previous_summary}" not in prompt:
            prompt = preamble.lstrip("\n") + "\n" + prompt
            preamble = ""
        values = {"messages": messages, "previous_summary": preamble}
        return _PLACEHOLDER.sub(lambda m: values[m.group(1)], prompt)


def _join(pieces: Sequence[str]) -> str:
    return "\n\n".join(pieces)
