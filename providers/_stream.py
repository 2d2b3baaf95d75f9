"""Assembling a streamed answer: text, reasoning and tool-call deltas into one `Message`.

Deltas arrive in pieces (a tool call's arguments over many chunks, interleaved by index);
`Assembly` keeps the partial state, yields each tool call once it is complete, and builds
the final message and usage when the stream ends.
"""

from __future__ import annotations

from typing import Any

from harness.messages import Message, ToolCall, new_id
from harness.request import Usage
from harness.types import StreamChunk
from providers._response import as_int, field, native_finish, str_or_none, usage_from


class PartialCall:
    """A tool call being assembled from stream deltas."""

    __slots__ = ("arguments", "id", "name", "type")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.type = "function"
        self.arguments: list[str] = []

    def done(self) -> ToolCall:
        return ToolCall(
            id=self.id or f"call_{new_id()}",
            name=self.name,
            arguments="".join(self.arguments) or "{}",
            type=self.type,
        )


class Assembly:
    """Collects stream deltas into the final assistant message, usage and finish reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, PartialCall] = {}
        self.emitted: dict[int, ToolCall] = {}
        self.thinking_blocks: list[dict[str, Any]] = []
        self.thinking_text: list[str] = []
        self.finish: str | None = None
        self.native_finish: str | None = None
        self.usage: Usage | None = None
        self.model: str = ""

    def add(self, raw: Any) -> list[StreamChunk]:
        """Take one litellm chunk; return the stream chunks it produces."""
        out: list[StreamChunk] = []
        self.model = self.model or str(field(raw, "model") or "")
        usage = field(raw, "usage")
        if usage is not None:
            self.usage = usage_from(usage)
        for choice in field(raw, "choices") or ():
            if as_int(field(choice, "index")) != 0:
                continue  # n > 1 is not supported: the chain works with one answer
            delta = field(choice, "delta")
            text = str_or_none(field(delta, "content"))
            reasoning = str_or_none(field(delta, "reasoning_content"))
            if text or reasoning:
                self.text.append(text or "")
                self.reasoning.append(reasoning or "")
                out.append(StreamChunk(text=text or "", reasoning=reasoning or ""))
            for block in field(delta, "thinking_blocks") or ():
                self._add_thinking(block)
            for call_delta in field(delta, "tool_calls") or ():
                index = as_int(field(call_delta, "index"))
                for finished in self._finish_before(index):
                    out.append(StreamChunk(tool_call=finished))
                self._merge(index, call_delta)
            finish = str_or_none(field(choice, "finish_reason"))
            if finish:
                self.finish = finish
                self.native_finish = native_finish(choice) or self.native_finish
        return out

    def _add_thinking(self, fragment: Any) -> None:
        """Join streamed thinking fragments into whole blocks, as litellm's own builder does.

        Text fragments accumulate until the fragment carrying the signature closes the
        block; a redacted block arrives whole. Only signed blocks are kept: the provider
        rejects a thinking block it did not sign.
        """
        kind = field(fragment, "type")
        if kind == "redacted_thinking":
            self.thinking_text.clear()
            if field(fragment, "data"):
                self.thinking_blocks.append(
                    {"type": "redacted_thinking", "data": field(fragment, "data")}
                )
            return
        text = field(fragment, "thinking")
        if isinstance(text, str) and text:
            self.thinking_text.append(text)
        signature = field(fragment, "signature")
        if isinstance(signature, str) and signature:
            thinking = "".join(self.thinking_text)
            self.thinking_blocks.append(
                {"type": "thinking", "thinking": thinking, "signature": signature}
            )
            self.thinking_text.clear()

    def _merge(self, index: int, delta: Any) -> None:
        call = self.calls.setdefault(index, PartialCall())
        call.id = call.id or (str_or_none(field(delta, "id")) or "")
        call.type = str_or_none(field(delta, "type")) or call.type
        function = field(delta, "function")
        name = str_or_none(field(function, "name"))
        if name and not call.name:
            call.name = name
        arguments = field(function, "arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)

    def _finish_before(self, index: int) -> list[ToolCall]:
        """Calls with a lower index are complete once a later one starts."""
        done = [i for i in sorted(self.calls) if i < index and i not in self.emitted]
        for i in done:
            self.emitted[i] = self.calls[i].done()
        return [self.emitted[i] for i in done]

    def flush_calls(self) -> list[ToolCall]:
        """Return the calls not yet yielded (the stream has ended)."""
        return self._finish_before(max(self.calls, default=-1) + 1)

    def message(self) -> Message:
        """Return the assembled assistant message."""
        calls = tuple(
            self.emitted[i] if i in self.emitted else self.calls[i].done()
            for i in sorted(self.calls)
        )
        text = "".join(self.text)
        reasoning = "".join(self.reasoning)
        return Message(
            role="assistant",
            content=text or None,
            tool_calls=calls,
            reasoning_content=reasoning or None,
            extra={"thinking_blocks": self.thinking_blocks} if self.thinking_blocks else None,
        )
