"""A deterministic offline model for tests, demos and benchmarks.

It answers from a script: strings become assistant text, `Message` objects are returned as
they are, callables receive the request (sync or async) and return either, exception
instances are raised, and a `BrokenStream` streams some text and then fails (as a
provider's stream can). It can overflow once the input passes a token threshold (counted as
an OpenAI-compatible server counts it, `ScriptedModel.prompt_tokens`: never with the harness's
own accounting, which a test double must be able to catch out), answers
summary requests (purpose ``summary``) with a built-in summariser unless scripted, and
records every request it received so tests assert on what the model actually saw.
`ScriptedModel.stream` yields the text word by word, so streaming is testable offline.
"""

from __future__ import annotations

import inspect
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from functools import cache
from typing import Any

from harness.accounting import estimate_request
from harness.errors import ContextOverflowError, HarnessError
from harness.messages import Message, ToolCall, new_id
from harness.request import ModelRequest, ModelResponse, Usage
from harness.tokens import TokenEstimator, estimator_for, tiktoken_encoding
from harness.types import StreamChunk


class ScriptExhausted(HarnessError, RuntimeError):
    """Raised when the ScriptedModel is asked for more replies than it was given."""


class BrokenStream:
    """A scripted reply whose stream breaks after some text.

    `ScriptedModel.stream` yields ``text`` word by word and then raises ``error``;
    `ScriptedModel.complete` raises ``error`` at once (nothing was answered).

    Args:
        text: the text streamed before the failure.
        error: what the stream raises then (e.g. a `ContextOverflowError`).
    """

    def __init__(self, text: str, error: BaseException) -> None:
        self.text = text
        self.error = error

    def __repr__(self) -> str:
        return f"BrokenStream({self.text!r}, {self.error!r})"


Reply = (
    str
    | Message
    | BaseException
    | BrokenStream
    | Callable[[ModelRequest], "Reply | Awaitable[Reply]"]
)
_WORDS = re.compile(r"\s*\S+\s*|\s+")


class ScriptedModel:
    """A scripted `ModelClient`.

    Args:
        replies: the script, consumed one entry per agent request.
        model: the model name it reports.
        window: the context window it reports (``None``: unknown).
        max_output: the most output tokens it reports it can answer (``None``: unknown).
        overflow_above: raise `ContextOverflowError` when the input exceeds this many tokens as
            an OpenAI-compatible server counts them (`prompt_tokens`), not as ``estimator``
            or `harness.accounting` does.
        default: the reply when the script is exhausted (``None``: raise `ScriptExhausted`).
        summary: the reply to ``summary`` requests (default: a short built-in summary).
        usage_factor: reported prompt tokens = estimate × this (to test calibration).
        estimator: how it counts the input it reports in ``usage`` and the output (default:
            exact o200k when available).
    """

    def __init__(
        self,
        replies: Iterable[Reply] = (),
        *,
        model: str = "scripted",
        window: int | None = 128_000,
        max_output: int | None = None,
        overflow_above: int | None = None,
        default: Reply | None = None,
        summary: Reply | None = None,
        usage_factor: float = 1.0,
        estimator: TokenEstimator | None = None,
    ) -> None:
        self.model = model
        self.script: deque[Reply] = deque(replies)
        self.window = window
        self.max_output = max_output
        self.overflow_above = overflow_above
        self.default = default
        self.summary = summary
        self.usage_factor = usage_factor
        self.estimator = estimator or estimator_for(model)
        self.requests: list[ModelRequest] = []
        """Every request received, in order (summary requests included)."""
        self.overflows = 0
        """How many times it raised an overflow."""

    # ---------------------------------------------------------------- script
    @staticmethod
    def tool_call(
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        text: str | None = None,
        id: str | None = None,
    ) -> Message:
        """Return an assistant message that calls ``name`` with ``arguments``."""
        call = ToolCall(
            id=id or f"call_{new_id()}", name=name, arguments=json.dumps(arguments or {})
        )
        return Message.assistant(text, tool_calls=[call])

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        self.script.extend(replies)

    @property
    def agent_requests(self) -> list[ModelRequest]:
        """The requests of the agent loop (purpose ``agent``)."""
        return [r for r in self.requests if r.ids.purpose == "agent"]

    # ---------------------------------------------------------- ModelClient
    def context_window(self, model: str | None = None) -> int | None:
        """Return the configured window."""
        return self.window

    def max_output_tokens(self, model: str | None = None) -> int | None:
        """Return the configured output limit (`harness.types.OutputLimited`)."""
        return self.max_output

    def provider_name(self, model: str) -> str:
        """Return ``scripted``: no provider serves this model (`harness.types.NamesProvider`)."""
        return "scripted"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer ``request`` from the script."""
        answer = await self._answer(request)
        if isinstance(answer, BrokenStream):
            raise answer.error
        return answer

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamChunk]:
        """Answer ``request`` from the script as chunks, word by word, then the response.

        Reasoning (``reasoning_content``) comes before the text, as thinking models send it.
        """
        answer = await self._answer(request)
        text = answer.text if isinstance(answer, BrokenStream) else answer.message.text
        if not isinstance(answer, BrokenStream) and answer.message.reasoning_content:
            for word in _WORDS.findall(answer.message.reasoning_content):
                yield StreamChunk(reasoning=word)
        for word in _WORDS.findall(text):
            yield StreamChunk(text=word)
        if isinstance(answer, BrokenStream):
            raise answer.error
        for call in answer.message.tool_calls:
            yield StreamChunk(tool_call=call)
        yield StreamChunk(usage=answer.usage, response=answer)

    @staticmethod
    def prompt_tokens(request: ModelRequest) -> int:
        """Return the input tokens of ``request`` as an OpenAI-compatible server counts them.

        The measure ``overflow_above`` compares with, independent of the harness's accounting:
        the exact ``o200k_base`` tokenizer over the request as the chat format sends it
        (`ModelRequest.render`: the text parts of each message), framed as OpenAI's cookbook
        describes for gpt-4o — 3 tokens per message, its role, text, reasoning, 1 more for a
        name, 3 per tool call with its name and arguments, 3 priming the reply — and the JSON of
        the tool schemas. The local OpenAI-compatible test server counts ``prompt_tokens`` the
        same way.
        """
        count = _o200k()
        total = 3
        for message in request.render():
            total += 3 + count(message.role) + count(message.text)
            if message.name:
                total += 1 + count(message.name)
            if message.reasoning_content:
                total += count(message.reasoning_content)
            for call in message.tool_calls:
                total += 3 + count(call.name) + count(call.arguments)
        if request.tools:
            total += count(json.dumps([t.to_openai() for t in request.tools]))
        return total

    # --------------------------------------------------------------- helpers
    async def _answer(self, request: ModelRequest) -> ModelResponse | BrokenStream:
        self.requests.append(request)
        size = 0 if self.overflow_above is None else self.prompt_tokens(request)
        if self.overflow_above is not None and size > self.overflow_above:
            self.overflows += 1
            raise ContextOverflowError(
                f"scripted overflow: input of {size} tokens exceeds {self.overflow_above}; "
                "compact the history or raise the model's window",
                provider="scripted",
                status=400,
            )
        reply = self._next(request)
        while True:
            if isinstance(reply, BaseException):
                raise reply
            if isinstance(reply, BrokenStream):
                return reply
            if callable(reply) and not isinstance(reply, Message):
                produced = reply(request)
                reply = await produced if inspect.isawaitable(produced) else produced
                continue
            break
        message = Message.assistant(reply) if isinstance(reply, str) else reply
        prompt = round(estimate_request(request, self.estimator) * self.usage_factor)
        completion = self.estimator.count(message.text) + sum(
            self.estimator.count(c.arguments) for c in message.tool_calls
        )
        return ModelResponse(
            message=message,
            usage=Usage(
                prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
            ),
            finish_reason="tool_calls" if message.tool_calls else "stop",
            model=self.model,
        )

    def _next(self, request: ModelRequest) -> Reply:
        if request.ids.purpose == "summary":
            return self.summary if self.summary is not None else _summarise
        if self.script:
            return self.script.popleft()
        if self.default is not None:
            return self.default
        raise ScriptExhausted(
            f"ScriptedModel ran out of replies after {len(self.agent_requests) - 1} agent requests; "
            "add more replies or set default="
        )


@cache
def _o200k() -> Callable[[str], int]:
    """Return the exact ``o200k_base`` token count of a text (tiktoken, litellm's files)."""
    encoding = tiktoken_encoding("o200k_base")

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=())) if text else 0

    return count


def _summarise(request: ModelRequest) -> str:
    """A deterministic stand-in summariser: counts and first lines of what it was given."""
    text = "\n".join(m.text for m in request.history)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    head = " | ".join(line[:80] for line in lines[:5])
    return (
        "## Goal\nContinue the user's task.\n"
        f"## Key conclusions\nSummarised {len(request.history)} message(s); first lines: {head}\n"
        "## Files and artefacts\n(see the session log)\n## Next steps\nContinue from the kept messages."
    )
