"""A real, scriptable OpenAI chat-completions server on 127.0.0.1 for integration tests.

Why a server and not a mock: the client under test talks to it *through litellm and HTTP*,
so what we check is what a real OpenAI-compatible provider would see and answer — the
exact JSON litellm sends (does ``reasoning_content`` survive?), real status codes and
real-shaped error bodies, real SSE streaming — not what our own code believes it sent.

The server speaks ``POST /v1/chat/completions`` (and ``/chat/completions``), JSON and SSE
(``data:`` chunks, ``[DONE]``, a usage chunk when ``stream_options.include_usage``). A test
scripts it with a queue of behaviours (`Reply`, `Raw`), one consumed per request; when
the queue is empty it answers ``default``. It records every request body, counts
``usage.prompt_tokens`` with tiktoken ``o200k_base`` read from litellm's shipped
tokenizer files (no download), optionally scaled by ``token_factor``, and in ``thinking``
mode answers like DeepSeek: a 400 when an assistant turn in the request lacks
``reasoning_content``.

It also speaks OpenAI's Responses API, ``POST /v1/responses`` (JSON, not streamed): the
same script answers it as ``output`` items (``reasoning``, ``message``, ``function_call``)
with ``usage.input_tokens`` counted over ``instructions``, the ``input`` items and the tools
(`count_responses_tokens`). With ``context_management=[{"type": "compaction",
"compact_threshold": N}]`` and an input past ``N`` it compacts as OpenAI does: the answer's
first output item is an opaque ``compaction`` item standing for every input item, which
costs `OpenAIServer.compact_ratio` of their tokens when sent back in a later ``input``; an
item it did not make gets a 400. With ``compaction=False`` it refuses the option like a
server that does not know it (400 ``unknown_parameter``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harness.tokens import tiktoken_encoding

CONTEXT_LENGTH_EXCEEDED: dict[str, Any] = {
    "error": {
        "message": (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130532 tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
"""OpenAI's 400 body for an input over the window, as the API sends it."""

REASONING_CONTENT_MISSING: dict[str, Any] = {
    "error": {
        "message": "The `reasoning_content` in the thinking mode must be passed back to the API.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
}
"""DeepSeek's 400 body when a thinking-mode request drops an assistant turn's reasoning."""

INVALID_API_KEY: dict[str, Any] = {
    "error": {
        "message": "Incorrect API key provided: test. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
"""OpenAI's 401 body for a rejected key."""

SERVER_ERROR: dict[str, Any] = {
    "error": {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
}
"""OpenAI's 500 body."""


def unknown_parameter(name: str) -> dict[str, Any]:
    """Return OpenAI's 400 body for a request field it does not know."""
    return {
        "error": {
            "message": f"Unknown parameter: '{name}'.",
            "type": "invalid_request_error",
            "param": name,
            "code": "unknown_parameter",
        }
    }


def invalid_encrypted_content(item_id: str) -> dict[str, Any]:
    """Return OpenAI's 400 body for a compaction or reasoning item it cannot decrypt."""
    return {
        "error": {
            "message": f"The encrypted content for item {item_id} could not be verified.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "invalid_encrypted_content",
        }
    }


def overflow_body(style: str, *, prompt: int, window: int, output: int = 0) -> dict[str, Any]:
    """Return the 400 body a server of ``style`` sends for an input over its window.

    Styles: ``vllm``, ``llama.cpp``, ``lm_studio``, ``ollama``, ``openai``, and ``bare``
    (a 400 that says nothing of the window, as some gateways send).
    """
    if style == "vllm":
        message = (
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt + output} tokens ({prompt} in the messages, {output} in the completion). "
            "Please reduce the length of the messages or completion."
        )
        return {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    if style == "llama.cpp":
        return {
            "error": {
                "code": 400,
                "message": f"request ({prompt} tokens) exceeds the available context size "
                f"({window} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": window,
            }
        }
    if style == "lm_studio":
        return {
            "error": f"Trying to keep the first {prompt} tokens when context the overflows. "
            f"However, the model is loaded with context length of only {window} tokens, which "
            "is not enough. Try to load the model with a larger context length, or provide a "
            "shorter input"
        }
    if style == "ollama":
        return {
            "error": {
                "message": f"prompt too long; exceeded max context length by "
                f"{prompt + output - window} tokens",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }
    if style == "openai":
        message = (
            f"This model's maximum context length is {window} tokens. However, your messages "
            f"resulted in {prompt} tokens. Please reduce the length of the messages."
        )
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    if style == "bare":
        return {"error": {"message": "Bad Request", "type": "invalid_request_error"}}
    raise ValueError(f"unknown overflow style {style!r}")


# --------------------------------------------------------------------------- behaviours
@dataclass(frozen=True, kw_only=True)
class ToolCallSpec:
    """One tool call the scripted assistant makes."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def arguments_json(self) -> str:
        """The arguments as the JSON text the API carries."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True, kw_only=True)
class Reply:
    """A successful answer: text, reasoning and/or tool calls."""

    text: str | None = None
    reasoning: str | None = None
    """Sent as ``reasoning_content`` (in thinking mode a default is made up when ``None``)."""
    tool_calls: tuple[ToolCallSpec, ...] = ()
    finish_reason: str | None = None
    """Defaults to ``tool_calls`` when there are calls, else ``stop``."""
    completion_tokens: int | None = None
    """Override the counted completion tokens (``0`` with ``length`` fakes an overflow)."""
    cached_tokens: int | None = None
    """Report ``prompt_tokens_details.cached_tokens`` (overrides the server's ``prefix_cache``)."""
    cache_write_tokens: int | None = None
    """Report ``cache_creation_input_tokens`` (Anthropic's cache writes, as litellm passes them)."""
    reasoning_tokens: int | None = None
    """Report ``completion_tokens_details.reasoning_tokens``."""
    thinking_blocks: tuple[Mapping[str, Any], ...] = ()
    """Anthropic-style signed thinking blocks, as litellm-compatible proxies send them."""
    delay_s: float = 0.0
    """Wait this long before answering (to test client timeouts)."""
    pause: threading.Event | None = None
    """When streaming: send the first half of the text, then wait (at most `PAUSE_LIMIT_S`)
    until this is set — a test sets it once it received a piece, proving the stream is read
    as it comes. `Reply.paused_out` says whether the wait ran out instead."""
    paused_out: list[bool] = field(default_factory=list)
    """Filled with one flag per paused stream: ``True`` when the pause ran out unset."""


PAUSE_LIMIT_S = 10.0
"""The longest a stream waits at `Reply.pause`."""


@dataclass(frozen=True, kw_only=True)
class Raw:
    """Any status and body, sent as is (JSON-encoded when not ``bytes``/``str``)."""

    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


Behaviour = Reply | Raw | Callable[[dict[str, Any]], "Reply | Raw"]


def reply(text: str, **kw: Any) -> Reply:
    """Return a text reply."""
    return Reply(text=text, **kw)


def tool_call(
    name: str, arguments: Mapping[str, Any] | None = None, *, id: str = "", **kw: Any
) -> Reply:
    """Return a reply that calls one tool."""
    return Reply(
        tool_calls=(ToolCallSpec(name=name, arguments=dict(arguments or {}), id=id),), **kw
    )


def error(status: int, body: Any) -> Raw:
    """Return an error answer with ``body`` (a dict is sent as JSON)."""
    return Raw(status=status, body=body)


def context_length_exceeded() -> Raw:
    """Return OpenAI's real 400 ``context_length_exceeded`` answer."""
    return Raw(status=400, body=CONTEXT_LENGTH_EXCEEDED)


# ------------------------------------------------------------------------ token counting
@cache
def _encoder() -> Any:
    # The exact o200k tokenizer, loaded from litellm's shipped files (never downloaded).
    return tiktoken_encoding("o200k_base")


def count_tokens(text: str) -> int:
    """Return the o200k_base token count of ``text``."""
    return len(_encoder().encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def count_prompt_tokens(body: Mapping[str, Any]) -> int:
    """Count a request's input tokens the way OpenAI's cookbook describes for chat models.

    3 tokens of framing per message, the tokens of its role, text, name, reasoning and
    tool calls, 3 tokens priming the reply, and the JSON of the tool schemas.
    """
    total = 3
    for message in body.get("messages") or ():
        total += 3
        total += count_tokens(str(message.get("role", "")))
        total += count_tokens(_content_text(message.get("content")))
        if message.get("name"):
            total += 1 + count_tokens(str(message["name"]))
        if message.get("reasoning_content"):
            total += count_tokens(str(message["reasoning_content"]))
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += 3 + count_tokens(str(function.get("name", "")))
            total += count_tokens(str(function.get("arguments", "")))
    if body.get("tools"):
        total += count_tokens(json.dumps(body["tools"]))
    return total


def _item_text(item: Mapping[str, Any]) -> str:
    """The text a Responses input item carries (a message's content, a call, its output)."""
    kind = item.get("type")
    if kind == "function_call":
        return str(item.get("name", "")) + str(item.get("arguments", ""))
    if kind == "function_call_output":
        return _content_text(item.get("output"))
    if kind == "reasoning":
        return "".join(str(p.get("text", "")) for p in item.get("summary") or ())
    return str(item.get("role", "")) + _content_text(item.get("content"))


def count_responses_tokens(
    body: Mapping[str, Any], compacted: Mapping[str, int] | None = None
) -> int:
    """Count a Responses request's input tokens: instructions, items and tools.

    3 tokens of framing per item, as `count_prompt_tokens` counts messages; a compaction
    item costs what ``compacted`` says its id stands for (``0`` when unknown).
    """
    total = 3
    if body.get("instructions"):
        total += 3 + count_tokens(str(body["instructions"]))
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items or ():
        total += 3
        if item.get("type") == "compaction":
            total += (compacted or {}).get(str(item.get("id", "")), 0)
        else:
            total += count_tokens(_item_text(item))
    if body.get("tools"):
        total += count_tokens(json.dumps(body["tools"]))
    return total


def compaction_threshold(body: Mapping[str, Any]) -> int | None:
    """Return the ``compact_threshold`` a Responses request asks for, if it asks."""
    for entry in body.get("context_management") or ():
        if isinstance(entry, Mapping) and entry.get("type") == "compaction":
            return int(entry.get("compact_threshold") or 0)
    return None


CACHE_MIN = 1024
"""`OpenAIServer.prefix_cache` caches nothing shorter (OpenAI's minimum)."""
CACHE_BLOCK = 128
"""… and counts cached tokens in blocks this size."""


# ------------------------------------------------------------------------------ server
class OpenAIServer:
    """A scriptable OpenAI-compatible chat-completions server in a background thread.

    Args:
        model: the model name reported in answers.
        thinking: answer like a DeepSeek thinking-mode model (see the module docstring).
        token_factor: reported prompt tokens = counted tokens × this, rounded up.
        default: the behaviour when the queue is empty.
        window: the context window it enforces: a request whose prompt tokens plus its
            ``max_tokens`` exceed it gets a 400 in ``overflow_style`` (`overflow_body`),
            before the script is consulted (``None``: no window).
        metadata: which server's metadata reports ``window``: ``vllm`` (``max_model_len``
            in ``GET /v1/models``), ``llama.cpp`` (``GET /props``), ``ollama``
            (``POST /api/show``), ``lm_studio`` (``max_context_length`` in ``/v1/models``)
            or ``none``.
        overflow_style: the wording of its overflow answer.
        prefix_cache: report cached tokens as OpenAI's automatic prompt cache does: the
            tokens of the longest run of leading messages (tools first) that an earlier
            request had too, counted in blocks of `CACHE_BLOCK` once at least
            `CACHE_MIN` — so a request that only grew at its end is mostly cached, and one
            whose prefix changed is not.
        compaction: on ``/v1/responses``, compact past ``context_management``'s threshold
            (``False``: refuse the option, and compaction items, with a 400).
        compact_ratio: a compaction item, sent back, costs this share of the tokens of the
            items it stands for (at least 32).

    Use as a context manager or call `start` / `stop`.
    """

    def __init__(
        self,
        *,
        model: str = "test-model",
        thinking: bool = False,
        token_factor: float = 1.0,
        default: Behaviour | None = None,
        window: int | None = None,
        metadata: str = "none",
        overflow_style: str = "vllm",
        prefix_cache: bool = False,
        compaction: bool = True,
        compact_ratio: float = 0.1,
    ) -> None:
        if metadata not in ("none", "vllm", "llama.cpp", "ollama", "lm_studio"):
            raise ValueError(f"unknown metadata style {metadata!r}")
        self.model = model
        self.window = window
        self.metadata = metadata
        self.overflow_style = overflow_style
        self.metadata_requests: list[str] = []
        """The path of every metadata request (``/v1/models``, ``/props``, ``/api/show``)."""
        self.over_window: list[int] = []
        """The prompt tokens of every request refused as over ``window``."""
        self.prompt_tokens: list[int] = []
        """The counted prompt tokens of every chat and Responses request, in order."""
        self.thinking = thinking
        self.prefix_cache = prefix_cache
        self._prefixes: set[str] = set()
        """Hashes of every request's leading parts seen so far (`prefix_cache`)."""
        self.token_factor = token_factor
        self.compaction = compaction
        self.compact_ratio = compact_ratio
        self.compacted: dict[str, int] = {}
        """The id of every compaction item made, with the tokens it costs when sent back."""
        self._encrypted: dict[str, str] = {}
        """The encrypted content of every compaction item made, by id."""
        self.input_tokens: list[int] = []
        """The reported ``input_tokens`` of every answered Responses request, in order."""
        self.default: Behaviour = default if default is not None else Reply(text="ok")
        self.requests: list[dict[str, Any]] = []
        """Every request body received, decoded, in order."""
        self.paths: list[str] = []
        """The path of every request, in order."""
        self.headers: list[dict[str, str]] = []
        """The headers of every request, in order."""
        self._queue: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> OpenAIServer:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread."""
        if self._httpd is not None:
            return self
        _encoder()  # load the tokenizer before the first request, not during it
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port."""
        if self._httpd is None:
            raise RuntimeError("the server is not started; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The ``api_base`` to give litellm: ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def drop_cache(self) -> None:
        """Forget every cached prefix (`prefix_cache`), as an expired entry or another replica."""
        with self._lock:
            self._prefixes.clear()

    # -------------------------------------------------------------------- script
    def push(self, *behaviours: Behaviour) -> None:
        """Queue behaviours; each request consumes one."""
        with self._lock:
            self._queue.extend(behaviours)

    @property
    def pending(self) -> int:
        """How many queued behaviours are left."""
        with self._lock:
            return len(self._queue)

    @property
    def last_request(self) -> dict[str, Any]:
        """The most recent request body."""
        if not self.requests:
            raise AssertionError("the server has received no request")
        return self.requests[-1]

    # ------------------------------------------------------------------ answering
    def _next(self, body: dict[str, Any]) -> Reply | Raw:
        with self._lock:
            behaviour = self._queue.popleft() if self._queue else self.default
        if isinstance(behaviour, Reply | Raw):
            return behaviour
        return behaviour(body)

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._counter += 1
            return f"{prefix}{self._counter:06d}"

    def answer(self, body: dict[str, Any]) -> Reply | Raw:
        """Decide the answer to ``body`` (the window, the thinking-mode check, the script)."""
        prompt = math.ceil(count_prompt_tokens(body) * self.token_factor)
        with self._lock:
            self.prompt_tokens.append(prompt)
        if self.window is not None:
            output = int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)
            if prompt + output > self.window:
                with self._lock:
                    self.over_window.append(prompt)
                return Raw(
                    status=400,
                    body=overflow_body(
                        self.overflow_style, prompt=prompt, window=self.window, output=output
                    ),
                )
        if self.thinking:
            for message in body.get("messages") or ():
                if message.get("role") == "assistant" and not message.get("reasoning_content"):
                    return Raw(status=400, body=REASONING_CONTENT_MISSING)
        return self._next(body)

    def answer_responses(self, body: dict[str, Any]) -> Reply | Raw:
        """Decide the answer to a Responses request (the option, its items, the window, the script)."""
        if not self.compaction and "context_management" in body:
            return Raw(status=400, body=unknown_parameter("context_management"))
        items = body.get("input")
        for item in items if isinstance(items, list) else ():
            if item.get("type") != "compaction":
                continue
            ident = str(item.get("id", ""))
            if not self.compaction:
                return Raw(status=400, body=unknown_parameter("input[].type=compaction"))
            with self._lock:
                known = self._encrypted.get(ident)
            if known is None or known != item.get("encrypted_content"):
                return Raw(status=400, body=invalid_encrypted_content(ident))
        prompt = math.ceil(count_responses_tokens(body, self.compacted) * self.token_factor)
        with self._lock:
            self.prompt_tokens.append(prompt)
        if self.window is not None:
            output = int(body.get("max_output_tokens") or 0)
            if prompt + output > self.window:
                with self._lock:
                    self.over_window.append(prompt)
                return Raw(
                    status=400,
                    body=overflow_body(
                        self.overflow_style, prompt=prompt, window=self.window, output=output
                    ),
                )
        return self._next(body)

    def response(self, body: Mapping[str, Any], behaviour: Reply) -> dict[str, Any]:
        """Return the Responses API object answering ``body`` with ``behaviour``.

        Past the request's ``compact_threshold`` the first output item is a new compaction
        item standing for every input item. The input is billed as sent: the compaction
        pass reads it all, and the savings show in the requests that send the item back.
        """
        prompt = math.ceil(count_responses_tokens(body, self.compacted) * self.token_factor)
        output: list[dict[str, Any]] = []
        threshold = compaction_threshold(body)
        if self.compaction and threshold is not None and prompt > threshold:
            output.append(self._compact(body))
        reasoning = self._reasoning(behaviour)
        if reasoning is not None:
            output.append(
                {
                    "type": "reasoning",
                    "id": self._new_id("rs_"),
                    "summary": [{"type": "summary_text", "text": reasoning}],
                }
            )
        if behaviour.text is not None:
            output.append(
                {
                    "type": "message",
                    "id": self._new_id("msg_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": behaviour.text, "annotations": []}],
                }
            )
        for call in self._calls(behaviour):
            output.append(
                {
                    "type": "function_call",
                    "id": self._new_id("fc_"),
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                    "status": "completed",
                }
            )
        chat_usage = self.usage({"messages": []}, behaviour)
        completion = int(chat_usage["completion_tokens"])
        usage: dict[str, Any] = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": behaviour.cached_tokens or 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": behaviour.reasoning_tokens or 0},
            "total_tokens": prompt + completion,
        }
        with self._lock:
            self.input_tokens.append(prompt)
        length = _finish(behaviour) == "length"
        return {
            "id": self._new_id("resp_"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if length else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if length else None,
            "error": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": list(body.get("tools") or ()),
            "store": bool(body.get("store", True)),
            "text": {"format": {"type": "text"}},
            "usage": usage,
        }

    def encrypted(self, item_id: str) -> str:
        """Return the encrypted content of the compaction item ``item_id`` this server made."""
        with self._lock:
            return self._encrypted[item_id]

    def _compact(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Make, remember and return a compaction item for every input item of ``body``."""
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        stands_for = count_responses_tokens({"input": items}, self.compacted) - 3
        cost = max(32, math.ceil(stands_for * self.compact_ratio))
        ident = self._new_id("cmp_")
        sealed = json.dumps({"id": ident, "items": len(items or ()), "tokens": stands_for})
        encrypted = "gAAAA" + base64.urlsafe_b64encode(sealed.encode()).decode()
        with self._lock:
            self.compacted[ident] = cost
            self._encrypted[ident] = encrypted
        return {"type": "compaction", "id": ident, "encrypted_content": encrypted}

    def usage(self, body: Mapping[str, Any], behaviour: Reply) -> dict[str, Any]:
        """Return the usage object for answering ``body`` with ``behaviour``."""
        prompt = math.ceil(count_prompt_tokens(body) * self.token_factor)
        if behaviour.completion_tokens is not None:
            completion = behaviour.completion_tokens
        else:
            produced = (behaviour.text or "") + (self._reasoning(behaviour) or "")
            produced += "".join(c.name + c.arguments_json() for c in behaviour.tool_calls)
            completion = count_tokens(produced)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        cached = behaviour.cached_tokens
        if cached is None and self.prefix_cache:
            cached = self._cached_prefix(body)
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        if behaviour.cache_write_tokens is not None:
            usage["cache_creation_input_tokens"] = behaviour.cache_write_tokens
        if behaviour.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": behaviour.reasoning_tokens}
        return usage

    def _cached_prefix(self, body: Mapping[str, Any]) -> int:
        """Return the cached tokens of ``body`` by the `prefix_cache` rule, and remember it."""
        parts = [json.dumps(body.get("tools") or [], sort_keys=True)]
        parts += [json.dumps(m, sort_keys=True) for m in body.get("messages") or ()]
        shared, tokens, digest = 0, 0, ""
        hashes = []
        for part in parts:
            digest = hashlib.sha256((digest + part).encode()).hexdigest()
            hashes.append(digest)
        with self._lock:
            for n, digest in enumerate(hashes):
                if digest not in self._prefixes:
                    break
                shared = n + 1
            self._prefixes.update(hashes)
        if shared:
            head = {
                "tools": body.get("tools"),
                "messages": list(body.get("messages") or ())[: shared - 1],
            }
            tokens = count_prompt_tokens(head) - 3  # no reply priming: the prefix only
        blocks = tokens // CACHE_BLOCK * CACHE_BLOCK
        return blocks if blocks >= CACHE_MIN else 0

    def _reasoning(self, behaviour: Reply) -> str | None:
        if behaviour.reasoning is not None:
            return behaviour.reasoning
        return "Let me think about this." if self.thinking else None

    def _calls(self, behaviour: Reply) -> list[dict[str, Any]]:
        return [
            {
                "id": call.id or self._new_id("call_"),
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call in behaviour.tool_calls
        ]

    def completion(self, body: Mapping[str, Any], behaviour: Reply) -> dict[str, Any]:
        """Return the non-streaming chat-completion object."""
        message: dict[str, Any] = {"role": "assistant", "content": behaviour.text}
        reasoning = self._reasoning(behaviour)
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        calls = self._calls(behaviour)
        if calls:
            message["tool_calls"] = calls
        if behaviour.thinking_blocks:
            message["thinking_blocks"] = [dict(b) for b in behaviour.thinking_blocks]
        return {
            "id": self._new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": _finish(behaviour),
                }
            ],
            "usage": self.usage(body, behaviour),
            "system_fingerprint": "fp_test",
        }

    def chunks(self, body: Mapping[str, Any], behaviour: Reply) -> Iterator[dict[str, Any]]:
        """Yield the streaming chunk objects (without ``[DONE]``)."""
        ident, created = self._new_id("chatcmpl-"), int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "system_fingerprint": "fp_test",
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }

        yield chunk({"role": "assistant", "content": ""})
        reasoning = self._reasoning(behaviour)
        for piece in _pieces(reasoning or ""):
            yield chunk({"reasoning_content": piece})
        for block in behaviour.thinking_blocks:
            if block.get("type") != "thinking":
                yield chunk({"thinking_blocks": [dict(block)]})
                continue
            for piece in _pieces(str(block.get("thinking", ""))):
                yield chunk({"thinking_blocks": [{"type": "thinking", "thinking": piece}]})
            signed = {"type": "thinking", "thinking": "", "signature": block.get("signature")}
            yield chunk({"thinking_blocks": [signed]})
        pieces = list(_pieces(behaviour.text or ""))
        for n, piece in enumerate(pieces):
            if behaviour.pause is not None and n == len(pieces) // 2:
                behaviour.paused_out.append(not behaviour.pause.wait(PAUSE_LIMIT_S))
            yield chunk({"content": piece})
        for index, call in enumerate(self._calls(behaviour)):
            function = call["function"]
            yield chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
            for piece in _pieces(function["arguments"]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, _finish(behaviour))
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            last = chunk({})
            last["choices"] = []
            last["usage"] = self.usage(body, behaviour)
            yield last


def _finish(behaviour: Reply) -> str:
    if behaviour.finish_reason is not None:
        return behaviour.finish_reason
    return "tool_calls" if behaviour.tool_calls else "stop"


def _pieces(text: str, size: int = 7) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def _make_handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Stay quiet: pytest shows failures, not access logs."""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path in ("/v1/models", "/models", "/props"):
                with server._lock:
                    server.metadata_requests.append(path)
            if path in ("/v1/models", "/models"):
                entry: dict[str, Any] = {"id": server.model, "object": "model"}
                if server.window is not None and server.metadata == "vllm":
                    entry.update(owned_by="vllm", root=server.model, max_model_len=server.window)
                if server.window is not None and server.metadata == "lm_studio":
                    entry.update(max_context_length=server.window, loaded_context_length=None)
                self._json(200, {"object": "list", "data": [entry]})
            elif path == "/props" and server.metadata == "llama.cpp" and server.window:
                self._json(
                    200,
                    {
                        "default_generation_settings": {"n_ctx": server.window, "temperature": 0.8},
                        "total_slots": 1,
                        "model_path": f"/models/{server.model}.gguf",
                    },
                )
            else:
                self._json(
                    404,
                    {
                        "error": {
                            "message": f"no route {self.path}",
                            "type": "invalid_request_error",
                        }
                    },
                )

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/api/show":
                with server._lock:
                    server.metadata_requests.append(path)
                if server.metadata == "ollama" and server.window:
                    self._json(
                        200,
                        {
                            "parameters": 'stop "<|eot_id|>"',
                            "model_info": {
                                "general.architecture": "llama",
                                "llama.context_length": server.window,
                                "llama.embedding_length": 4096,
                            },
                        },
                    )
                    return
            responses = path in ("/v1/responses", "/responses")
            if not responses and path not in ("/v1/chat/completions", "/chat/completions"):
                self._json(
                    404,
                    {
                        "error": {
                            "message": f"no route {self.path}",
                            "type": "invalid_request_error",
                        }
                    },
                )
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(
                    400,
                    {
                        "error": {
                            "message": "We could not parse the JSON body of your request.",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": None,
                        }
                    },
                )
                return
            with server._lock:
                server.requests.append(body)
                server.paths.append(self.path)
                server.headers.append({k.lower(): v for k, v in self.headers.items()})
            behaviour = server.answer_responses(body) if responses else server.answer(body)
            try:
                if isinstance(behaviour, Raw):
                    self._raw(behaviour)
                    return
                if behaviour.delay_s:
                    time.sleep(behaviour.delay_s)
                if responses:
                    self._json(200, server.response(body, behaviour))
                elif body.get("stream"):
                    self._stream(body, behaviour)
                else:
                    self._json(200, server.completion(body, behaviour))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test); nothing to answer

        # ---------------------------------------------------------------- writing
        def _json(self, status: int, payload: Any) -> None:
            self._send(status, json.dumps(payload).encode(), {"Content-Type": "application/json"})

        def _raw(self, behaviour: Raw) -> None:
            body = behaviour.body
            headers = {"Content-Type": "application/json", **behaviour.headers}
            if isinstance(body, bytes):
                data = body
            elif isinstance(body, str):
                data = body.encode()
            else:
                data = json.dumps(body).encode()
            self._send(behaviour.status, data, headers)

        def _send(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = "Status"
            self.send_response(status, phrase)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _stream(self, body: Mapping[str, Any], behaviour: Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream; charset=utf-8")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for item in server.chunks(body, behaviour):
                self._chunk(f"data: {json.dumps(item)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler
