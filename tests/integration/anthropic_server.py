"""A real Anthropic Messages server on 127.0.0.1 that caches prompts the way Anthropic does.

litellm's ``anthropic/...`` route posts to ``{api_base}/v1/messages``; this server answers it
with a scripted text or tool-use reply and reports usage as Anthropic does: ``input_tokens``
(after the last cache mark), ``cache_creation_input_tokens`` and ``cache_read_input_tokens``.

Caching follows Anthropic's documented rules: the prompt is the tools, then the System
blocks, then each message's content blocks, in order; a block marked ``cache_control`` ends a
cacheable prefix, which the request writes; a request reads the longest cached prefix that
ends at one of its marks or at most 20 blocks before one. Tokens are counted with tiktoken
``o200k_base`` (litellm's shipped files), one count per block, so the figures are
deterministic; ``min_cacheable`` mimics the minimum cacheable prompt (0: any length).

Context management as Anthropic documents it: ``clear_tool_uses`` clears old tool results
past its trigger (`cleared`); ``compact_20260112`` (`compacted`) first drops every message
block before the newest ``compaction`` block in the request, then, when what is left
passes its trigger, answers with a new compaction block (a summary costing
`COMPACT_SHARE` of what it replaces) before the reply. ``requests`` and ``usages`` record
what the model read: the body after those edits.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .openai_server import count_tokens

LOOKBACK = 20
"""How many blocks before a mark Anthropic looks for an earlier cache entry."""


@dataclass
class AnthropicReply:
    """One scripted answer: text, or a tool use when ``tool`` is set."""

    text: str = "ok"
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class CacheUsage:
    """What one request read, wrote and paid in full, as the server reported it."""

    input_tokens: int
    cache_read: int
    cache_write: int
    marks: int


def _blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """Return the prompt as (canonical block text, marked) in Anthropic's prefix order."""
    out: list[tuple[str, bool]] = []

    def add(block: Any) -> None:
        if isinstance(block, dict):
            marked = block.get("cache_control") is not None
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            out.append((json.dumps(plain, sort_keys=True, ensure_ascii=False), marked))
        else:
            out.append((json.dumps(block, ensure_ascii=False), False))

    for tool in body.get("tools") or []:
        add(tool)
    system = body.get("system")
    if isinstance(system, str):
        add({"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add(block)
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            add({"type": "text", "text": content, "role": message.get("role")})
        else:
            for block in content or []:
                add({**block, "role": message.get("role")} if isinstance(block, dict) else block)
    return out


class AnthropicServer:
    """A scriptable Anthropic Messages endpoint with a prompt cache; a context manager."""

    def __init__(self, *, min_cacheable: int = 0) -> None:
        self.min_cacheable = min_cacheable
        self.requests: list[dict[str, Any]] = []
        """Every request body as the model read it (after the server's context edits)."""
        self.headers: list[dict[str, str]] = []
        self.usages: list[CacheUsage] = []
        self.compactions: list[str] = []
        """The summary of every compaction block the server made, in order."""
        self._queue: deque[AnthropicReply] = deque()
        self._cache: set[str] = set()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> AnthropicServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base_url(self) -> str:
        """The ``api_base`` for litellm (it appends ``/v1/messages``)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def drop_cache(self) -> None:
        """Forget every cache entry, as Anthropic does when one outlives its TTL."""
        with self._lock:
            self._cache.clear()

    def push(self, *replies: AnthropicReply) -> None:
        """Queue answers, one per request; an empty queue answers ``ok``."""
        self._queue.extend(replies)

    def usage_for(self, body: dict[str, Any]) -> CacheUsage:
        """Return (and record in the cache) what ``body`` reads, writes and pays in full."""
        blocks = _blocks(body)
        hashes: list[str] = []
        totals: list[int] = []
        running = hashlib.sha256(str(body.get("model")).encode())
        tokens = 0
        for text, _ in blocks:
            running.update(text.encode())
            hashes.append(running.copy().hexdigest())
            tokens += count_tokens(text)
            totals.append(tokens)
        marks = [i for i, (_, marked) in enumerate(blocks) if marked]
        with self._lock:
            read = 0
            for mark in marks:
                for j in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                    if hashes[j] in self._cache:
                        read = max(read, totals[j])
                        break
            written = 0
            for mark in marks:
                if totals[mark] >= self.min_cacheable:
                    self._cache.add(hashes[mark])
                    written = max(written, totals[mark])
        write = max(0, written - read)
        return CacheUsage(
            input_tokens=tokens - read - write, cache_read=read, cache_write=write, marks=len(marks)
        )

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """Return the Messages API answer for ``body``."""
        body, summary = compacted(body)
        body, applied = cleared(body)
        usage = self.usage_for(body)
        with self._lock:
            self.requests.append(body)
            self.usages.append(usage)
            reply = self._queue.popleft() if self._queue else AnthropicReply()
        if reply.tool is not None:
            content: list[dict[str, Any]] = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{len(self.requests)}",
                    "name": reply.tool,
                    "input": reply.arguments,
                }
            ]
            stop = "tool_use"
        else:
            content = [{"type": "text", "text": reply.text}]
            stop = "end_turn"
        if summary is not None:
            content.insert(0, {"type": "compaction", "content": summary})
            with self._lock:
                self.compactions.append(summary)
        answer: dict[str, Any] = {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": count_tokens(reply.text),
                "cache_creation_input_tokens": usage.cache_write,
                "cache_read_input_tokens": usage.cache_read,
            },
        }
        if applied is not None:
            answer["context_management"] = {"applied_edits": applied}
        return answer


COMPACT_SHARE = 0.1
"""A compaction block's summary costs this share of the tokens it replaces."""


def compacted(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Apply the request's ``compact_20260112`` edit as Anthropic documents it.

    Every message block before the newest ``compaction`` block is dropped (the API does
    this whether or not the edit is asked for); past the edit's trigger (input tokens, by
    default 150,000) the rest is summarised. Returns the body the model reads and the new
    summary (``None``: nothing compacted).
    """
    messages = list(body.get("messages") or [])
    for at in range(len(messages) - 1, -1, -1):
        content = messages[at].get("content")
        blocks = content if isinstance(content, list) else []
        found = [
            n for n, b in enumerate(blocks) if isinstance(b, dict) and b.get("type") == "compaction"
        ]
        if found:
            messages = [{**messages[at], "content": blocks[found[-1] :]}, *messages[at + 1 :]]
            body = {**body, "messages": messages}
            break
    edits = (body.get("context_management") or {}).get("edits") or []
    edit = next((e for e in edits if e.get("type") == "compact_20260112"), None)
    if edit is None:
        return body, None
    total = sum(count_tokens(text) for text, _ in _blocks(body))
    trigger = int((edit.get("trigger") or {}).get("value", 150_000))
    if total <= trigger:
        return body, None
    words = max(8, int(total * COMPACT_SHARE))
    return body, f"Summary of {len(messages)} messages ({total} tokens): " + "noted " * words


CLEARED = "[cleared to save context]"
"""What a cleared tool result reads (the model sees that a result was there)."""


def cleared(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """Apply the request's ``clear_tool_uses`` edit as Anthropic documents it.

    Past the trigger (input tokens), the oldest tool results are cleared, keeping the newest
    ``keep`` tool uses and the excluded tools' results, when that frees at least
    ``clear_at_least`` tokens. Returns the body the model reads and the applied edits
    (``None``: the request asked for none).
    """
    edits = (body.get("context_management") or {}).get("edits") or []
    edit = next((e for e in edits if str(e.get("type", "")).startswith("clear_tool_uses")), None)
    if edit is None:
        return body, None
    total = sum(count_tokens(text) for text, _ in _blocks(body))
    trigger = int((edit.get("trigger") or {}).get("value", 100_000))
    if total <= trigger:
        return body, []
    keep = int((edit.get("keep") or {}).get("value", 3))
    excluded = set(edit.get("exclude_tools") or ())
    least = int((edit.get("clear_at_least") or {}).get("value", 0))
    names: dict[str, str] = {}
    results: list[dict[str, Any]] = []
    messages = json.loads(json.dumps(body.get("messages") or []))
    for message in messages:
        for block in message.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                names[block["id"]] = block.get("name", "")
            elif block.get("type") == "tool_result":
                results.append(block)
    candidates = results[: max(0, len(results) - keep)]
    candidates = [b for b in candidates if names.get(b.get("tool_use_id", "")) not in excluded]
    freed = 0
    for block in candidates:
        before = count_tokens(json.dumps(block.get("content"), ensure_ascii=False))
        block["content"] = CLEARED
        freed += before - count_tokens(json.dumps(CLEARED))
    if not candidates or freed < least:
        return body, []
    applied = {
        "type": edit["type"],
        "cleared_tool_uses": len(candidates),
        "cleared_input_tokens": freed,
    }
    return {**body, "messages": messages}, [applied]


def _handler(server: AnthropicServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            server.headers.append({k.lower(): v for k, v in self.headers.items()})
            if self.path.rstrip("/") != "/v1/messages":
                self._send(404, {"type": "error", "error": {"type": "not_found_error"}})
                return
            self._send(200, server.answer(body))

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
