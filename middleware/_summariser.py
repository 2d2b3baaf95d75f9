"""The summariser side of Compaction: prompts, rendering, chunk packing and the requests.

Summary requests go straight to the summariser model, never through the stack (they load
no dynamic sources and show no task state), and each one reports its own manifest
(purpose ``summary``) like the agent's requests do.
"""

from __future__ import annotations

from typing import Final

import anyio
import msgspec

from harness.accounting import build_manifest, counted_near_limit, report_manifest, sure_count
from harness.errors import ContextOverflowError, ProviderError
from harness.messages import Message, new_id
from harness.request import ModelClientLike, ModelRequest
from harness.tokens import TokenEstimator

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
