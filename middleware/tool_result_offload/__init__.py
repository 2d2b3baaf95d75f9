"""ToolResultOffload: keep huge tool results in the workspace and show the model a preview.

Where it sits: after the material middleware (WorkspaceMaterials, ContextSources, TaskState,
FragmentEditor) and before BudgetFit and Compaction, so that budget fitting and compaction
measure the small preview instead of a 200,000-character log.

A ``tool`` message longer than ``max_result_chars`` — or whose estimated tokens exceed
``max_result_share`` of the request's input limit (a dense script such as Hangul fills a
window long before 80,000 characters) — is written, byte for byte (UTF-8), to
``large_tool_results/<user and session key>/<result key>.txt`` in the workspace and replaced
in the request by its first and last ``preview_chars`` characters, the file's path and how
to read it with the ``read_file`` tool, which this middleware also gives the agent (and
which lets a session read only its own folder). Both keys are 128-bit hashes
(`harness.workspace.scope_key`): no id, path or text from the model or the tool ever becomes
part of a file name. The result key covers the call id, the message id and the content, so
every result has its own file: a repeated ``tool_call_id`` never reuses or overwrites
another result's file.

The agent commits the rewritten history, so a result is offloaded once; the replacement
carries ``metadata["offloaded"]`` and is skipped afterwards. A file already holding the
same bytes (a round that failed after the write) is not written again. Files live per
session (`purge_session` removes a session's) and files older than ``max_age_s`` are swept
at most once per agent call and once per folder every `SWEEP_INTERVAL_S` seconds.

**When the write fails** (read-only or full filesystem, a file where the folder should be,
any `OSError`) or there is no workspace at all, the result is replaced by an inline
head-and-tail preview that says the middle is not available, with the transform
``offload_failed:<call id>:<reason>``; the session goes on and no temporary file is left.

**Images** (see `middleware.tool_result_offload._images`): a tool result's inline base64
image whose decoded bytes exceed ``max_image_bytes`` (1 MB) — or whose tokens, by the
estimator's image rule, exceed ``max_result_share`` of the input limit — is written,
decoded, to the same session folder (``<key>.png``, ``.jpg`` … by its media type) and
replaced by a one-line placeholder naming the file, its size and dimensions; the request
records ``tool_image_offload:<call id>:<count>``. ``read_file`` on that file attaches the
image again. An image that cannot be decoded or written stays in place, recorded as
``tool_image_offload_failed:<call id>:<n>:<reason>``.

Incremental: a round scans only the messages after the prefix its history shares with the
one this middleware passed on last time in the session
(`harness.accounting.prefix.shared_prefix`; the same limit and estimator): those were
decided already and the decision depends on the message alone. So a round costs the prefix
comparison, one slot look-up (the session's notes, which also name the call that swept last)
and, per new tool result, its first token count — which the estimator's cache keeps, so the
layers after it do not count that result again. Only a sweep awaits.

Workspace: the one given to the constructor, else the agent's (an agent given none has a
private in-memory one, `harness.workspace.Workspace.private`, shared with nobody).

**The ``read_file`` tool is offered only once there is something for it to read**: its
schema (about 100 tokens) is left out of a session's requests until this session has an
offloaded result — one offloaded in this request, a preview in the history, or files in the
session's folder (a session resumed in another process). From then on every request of the
session offers it, so the cached prefix changes once, when it appears, and never flips back.
``always_offer_read_file=True`` offers it from the first request (the agent then also reads
project files with it before anything was offloaded). The agent runs the tool whenever the
model calls it, offered or not.
"""

from __future__ import annotations

import errno
import hashlib
import time
from collections.abc import Iterable
from typing import Any, ClassVar, Final

import anyio.to_thread

from harness.accounting.prefix import shared_prefix
from harness.errors import ConfigurationError, ContextBudgetExceeded, WorkspaceError
from harness.manifest import Transform, TransformKind
from harness.markers import IMAGES_OFFLOADED
from harness.messages import ContentPart, Message, ToolSchema
from harness.request import ModelRequest, ModelResponse, RunScope
from harness.tokens import image_tokens
from harness.tools import Tool
from harness.types import Concern, Handler
from harness.workspace import Workspace, scope_key
from middleware._history import label
from middleware._layout import SUMMARY_ROOM
from middleware.tool_result_offload._images import (
    TOOL_IMAGE_OFFLOAD as TOOL_IMAGE_OFFLOAD,
)
from middleware.tool_result_offload._images import (
    TOOL_IMAGE_OFFLOAD_FAILED as TOOL_IMAGE_OFFLOAD_FAILED,
)
from middleware.tool_result_offload._images import (
    Found,
    decoded_size,
    inline_image,
    offload_images,
)
from middleware.tool_result_offload._read_file import (
    COMPACT_READER,
    read_file_tool,
    relative_folder,
    session_key,
)

TOOL_RESULT_OFFLOAD: Final = TransformKind("tool_result_offload")
"""A large tool result moved to a file, a preview kept: ``tool_result_offload:<id>``."""
OFFLOAD_FAILED: Final = TransformKind("offload_failed")
"""A result that could not be written, kept whole: ``offload_failed:<id>:<reason>``."""
NEWEST_RESULT_OFFLOAD: Final = TransformKind("newest_result_offload")
"""One of the newest tool results, under the size limits but too big for the budget beside
what cannot be dropped, moved to a file and the request prepared again:
``newest_result_offload:<id>``."""

DEFAULT_EXEMPT_TOOLS: frozenset[str] = frozenset(
    {"read_file", "write_file", "edit_file", "memory_search", "memory_get", "session_search"}
)
"""Tools whose results are never offloaded (they read or page content themselves)."""
DEFAULT_MAX_IMAGE_BYTES = 1_000_000
"""Images of tool results over this many (decoded) bytes are offloaded (see the class)."""
DEFAULT_FOLDER = "large_tool_results"
"""The workspace folder offloaded results are written to."""
_MIN_KEEP = 100
"""A token-sized preview keeps at least this many characters at each end."""
COMPACT_READER_SHARE: Final = 1 / 16
"""A session whose full ``read_file`` schema would take more than this share of its input
limit is offered `COMPACT_READER` instead."""
_MIN_HEAD = 40
"""A newest result's pointer keeps its head only when that is at least this many characters."""
_PAGE_HEADER = 30
"""Tokens a ``read_file`` page spends on its header line, about."""
_PREVIEW_FRAMING = 10
"""Tokens the head's own line in a pointer costs, about."""
_WEEK_S = 7 * 24 * 3600
SWEEP_INTERVAL_S = 60.0
"""A folder is swept for expired results at most this often per process (any call)."""
_LAST_SWEEP: dict[tuple[str, str, str], float] = {}
"""(filesystem, workspace root, folder) → when it was last swept (monotonic seconds)."""


class ToolResultOffload:
    """Write oversized tool results to the workspace; keep head, tail and a pointer.

    Args:
        max_result_chars: results longer than this many characters are offloaded.
        max_result_share: results whose estimated tokens exceed this share of the input
            limit are offloaded too, and a preview never takes more than a quarter of this
            share (it keeps fewer characters when it would); ``None`` turns both off.
        preview_chars: characters kept from the start and from the end of the result.
        exempt_tools: names of tools whose results are never offloaded.
        folder: the workspace folder for offloaded results (relative).
        max_age_s: offloaded files older than this many seconds are deleted, checked at
            most once per agent call and once per folder every `SWEEP_INTERVAL_S` seconds;
            ``None`` keeps them until `purge_session`.
        workspace: where to write (default: the agent's workspace).
        always_offer_read_file: offer the ``read_file`` tool (`tools`) on every request;
            by default a session's requests offer it only once the session has an offloaded
            result, and on every request after that.
        max_image_bytes: a tool result's inline base64 image over this many decoded bytes
            is offloaded, as is one whose tokens (the estimator's image rule) exceed
            ``max_result_share`` of the input limit; ``None`` keeps every image inline. The
            default, 1 MB, is what an image the model sees in full needs: providers scale
            an image to about 1.15 megapixels (≈1,600 tokens at most, whatever its size),
            and a screenshot or photo at that size is a few hundred KB as PNG or JPEG. An
            image over 1 MB is mostly bytes the provider throws away, yet they travel with
            every later request of the session, and a few of them pass Anthropic's limits
            (5 MB per image, 32 MB per request), which refuse the request.

    When a result cannot be written, the preview is inline (head and tail, ``preview_chars``
    each, or a quarter of ``max_result_chars`` up to 2,000 when that is 0) and the request
    records ``offload_failed:<call id>:<reason>``.

    Raises:
        ConfigurationError: when an argument is out of range.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.SHRINKS_TOOL_RESULTS})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self,
        *,
        max_result_chars: int = 80_000,
        max_result_share: float | None = 0.25,
        preview_chars: int = 2_000,
        exempt_tools: Iterable[str] = DEFAULT_EXEMPT_TOOLS,
        folder: str = DEFAULT_FOLDER,
        max_age_s: float | None = _WEEK_S,
        workspace: Workspace | None = None,
        always_offer_read_file: bool = False,
        max_image_bytes: int | None = DEFAULT_MAX_IMAGE_BYTES,
    ) -> None:
        if not _is_int(max_result_chars) or max_result_chars < 1:
            raise ConfigurationError(
                f"max_result_chars must be a positive int, got {max_result_chars!r}"
            )
        if max_result_share is not None and (
            isinstance(max_result_share, bool)
            or not isinstance(max_result_share, int | float)
            or not 0 < max_result_share <= 1
        ):
            raise ConfigurationError(
                f"max_result_share must be a fraction in (0, 1] or None, got {max_result_share!r}"
            )
        if not _is_int(preview_chars) or preview_chars < 0:
            raise ConfigurationError(f"preview_chars must be an int ≥ 0, got {preview_chars!r}")
        if 2 * preview_chars >= max_result_chars:
            raise ConfigurationError(
                f"preview_chars ({preview_chars}) keeps head and tail, so it must be less than "
                f"half of max_result_chars ({max_result_chars}); lower it"
            )
        if isinstance(exempt_tools, str) or not all(isinstance(t, str) for t in exempt_tools):
            raise ConfigurationError(
                "exempt_tools must be a collection of tool names, e.g. frozenset({'read_file'})"
            )
        if max_age_s is not None and (
            isinstance(max_age_s, bool) or not isinstance(max_age_s, int | float) or max_age_s <= 0
        ):
            raise ConfigurationError(
                f"max_age_s must be a positive number of seconds or None, got {max_age_s!r}"
            )
        if max_image_bytes is not None and (not _is_int(max_image_bytes) or max_image_bytes < 1):
            raise ConfigurationError(
                f"max_image_bytes must be a positive int or None, got {max_image_bytes!r}"
            )
        if workspace is not None and not isinstance(workspace, Workspace):
            raise ConfigurationError(f"workspace must be a Workspace or None, got {workspace!r}")
        self.max_result_chars = max_result_chars
        self.max_result_share = max_result_share
        self.preview_chars = preview_chars
        self.exempt_tools = frozenset(exempt_tools)
        self.folder = relative_folder(folder)
        self.max_age_s = max_age_s
        self.workspace = workspace
        self.always_offer_read_file = bool(always_offer_read_file)
        self.max_image_bytes = max_image_bytes
        self._reader: Tool | None = None
        """The ``read_file`` tool `tools` gave the agent (made once: its schema is compared)."""
        self._hidden: dict[
            tuple[int, bool], tuple[tuple[ToolSchema, ...], tuple[ToolSchema, ...]]
        ] = {}
        """(id(tools), compact) → (tools, tools with the short reader or without it): one
        tuple per tool list, so a
        request's tools keep their identity from round to round (the accounting caches by it)."""

    def __repr__(self) -> str:
        return (
            f"ToolResultOffload(max_result_chars={self.max_result_chars}, "
            f"preview_chars={self.preview_chars}, folder={self.folder!r})"
        )

    def tools(self) -> list[Tool]:
        """Return the ``read_file`` tool that reads offloaded results back.

        A session's requests offer it once the session has an offloaded result (see the
        module's docstring), or always with ``always_offer_read_file=True``.
        """
        if self._reader is None:
            self._reader = read_file_tool(workspace=self.workspace, private_folder=self.folder)
        return [self._reader]

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Offload the oversized tool results of ``request`` and pass it on."""
        run = request.run
        ws = self.workspace if self.workspace is not None else run.workspace if run else None
        # What was decided is kept across the session's calls; the sweep is once per call.
        notes = run.session_slot(self, _Notes) if run is not None else None
        if (
            ws is not None
            and run is not None
            and notes is not None
            and notes.swept_in != run.run_id  # swept in this call already: the usual round
            and self._sweep_due(notes, run)
        ):
            await self._sweep(ws)
        history = request.history
        start = notes.decided(request) if notes is not None else 0
        replaced: dict[int, Message] = {}
        transforms: list[Transform] = []
        names: dict[str, str] | None = None
        seen = False  # an offload preview among the messages looked at
        for index in range(start, len(history)):
            message = history[index]
            if message.role != "tool":
                continue
            metadata, text = message.metadata, message.content
            if metadata is not None and metadata.get(IMAGES_OFFLOADED):
                seen = True
            if metadata is not None and _done(metadata):
                seen = seen or isinstance(metadata.get("offloaded"), str)
                continue
            if (
                isinstance(text, tuple)
                and self.max_image_bytes is not None
                and any(inline_image(part) is not None for part in text)
            ):
                names = names if names is not None or message.name else _call_names(history)
                if self._exempt(message, names):
                    continue
                outcome = await offload_images(
                    message,
                    key=label(message.tool_call_id or message.id),
                    folder=self._session_folder(request),
                    too_big=lambda part, found: self._image_too_big(part, found, request),
                    store=None if ws is None else lambda path, data: _store(ws, path, data),
                )
                transforms.extend(outcome.transforms)
                if outcome.offloaded:
                    replaced[index] = message = outcome.message
                    text, seen = message.content, True
            if not isinstance(text, str):
                text = _plain_text(message)
            if text is None or not self._too_big(text, message, request):
                continue
            names = names if names is not None or message.name else _call_names(history)
            if self._exempt(message, names):
                continue
            key = label(message.tool_call_id or message.id)
            data = text.encode("utf-8", "surrogatepass")
            path = offload_path(
                message,
                data=data,
                session_id=request.ids.session_id,
                user_id=request.ids.user_id,
                agent_id=request.ids.agent_id,
                folder=self.folder,
            )
            reason = "no_workspace" if ws is None else await _store(ws, path, data)
            keep = self._keep(text, request, self.preview_chars if reason is None else None)
            if reason is None:
                replaced[index] = message.revise(
                    "offload",
                    metadata={"offloaded": path, "offloaded_chars": len(text)},
                    content=self._preview(text, path, keep),
                )
                transforms.append(Transform(TOOL_RESULT_OFFLOAD, key))
                seen = True
            else:
                replaced[index] = message.revise(
                    "offload",
                    metadata={"offload_failed": reason, "offloaded_chars": len(text)},
                    content=self._inline_preview(text, reason, keep),
                )
                transforms.append(Transform(OFFLOAD_FAILED, f"{key}:{reason}"))
        # The results offloaded in this request by size, by their preview's id: a retry for
        # the budget starts again from the result itself.
        originals = {replaced[i].id: history[i] for i in replaced}
        if replaced:  # new results only: the messages before the first are kept as a slice
            first = min(replaced)
            tail = tuple(replaced.get(i, history[i]) for i in range(first, len(history)))
            request = request.replace(history=history[:first] + tail)
        if transforms:  # an image left in place is recorded too, with nothing replaced
            request = request.with_transforms(*transforms)
        if notes is not None:
            notes.passed_on(request)
        offered = request.tools
        if self._compact_reader(request, notes):
            offered = self._tools_view(offered, compact=True)
        if not await self._reader_offered(request, notes, ws, seen):
            request = request.replace(tools=self._tools_view(offered, compact=False))
        elif offered is not request.tools:
            request = request.replace(tools=offered)
        try:
            return await call_next(request)
        except ContextBudgetExceeded as exc:
            error = exc
        # The newest results could not be dropped and do not fit beside the fixed cost:
        # offload them too and prepare the request again — first with as much of their
        # head as the shortfall leaves room for, then, if that still does not fit, with
        # the pointer alone. Tools are not run again; nothing was sent.
        ids = set(error.protected_results)
        for head in (True, False):
            shrunk = await self._offload_newest(
                request, ids, originals, error, ws, offered, head=head
            )
            if shrunk is None:
                break
            smaller, kept_head = shrunk
            if notes is not None:
                notes.passed_on(smaller)
                notes.reader = True  # a preview is in the history from now on
            try:
                return await call_next(smaller)
            except ContextBudgetExceeded as exc:
                error = exc
                ids |= set(exc.protected_results)
            if not kept_head:  # the pointers alone did not fit: nothing smaller to try
                break
        raise error

    # --------------------------------------------------------------- private
    async def _offload_newest(
        self,
        request: ModelRequest,
        ids: set[str],
        originals: dict[str, Message],
        error: ContextBudgetExceeded,
        ws: Workspace | None,
        offered: tuple[ToolSchema, ...],
        *,
        head: bool,
    ) -> tuple[ModelRequest, bool] | None:
        """Return ``request`` with its newest results ``ids`` offloaded, and whether a head was kept.

        Only results of the history's trailing tool messages that are plain text, not
        exempt and not offloaded already, and only when the host offers ``read_file``
        (``offered``) and the file is written: the model must be able to read them back.
        A result this request offloaded by size (``originals``: preview id → result) is
        offloaded again from the result, with the shorter pointer. With ``head`` each
        pointer keeps the result's first characters, as many as the shortfall in ``error``
        leaves room for. ``None`` when nothing could be offloaded.
        """
        reader = self._reader
        if ws is None or reader is None or not ids or not _offers(reader, offered):
            return None
        history, est = request.history, request.estimator
        found: list[tuple[int, Message, str, str]] = []
        sent_tokens = 0  # what the results cost in the request that failed
        names: dict[str, str] | None = None
        index = len(history)
        while index > 0 and history[index - 1].role == "tool":
            index -= 1
            sent = history[index]
            if sent.id not in ids:
                continue
            message = originals.get(sent.id, sent)
            text = _plain_text(message)
            name = message.name
            if name is None:
                names = names if names is not None else _call_names(history)
                name = names.get(message.tool_call_id or "")
            metadata = message.metadata
            if not text or name in self.exempt_tools or (metadata is not None and _done(metadata)):
                continue
            data = text.encode("utf-8", "surrogatepass")
            path = offload_path(
                message,
                data=data,
                session_id=request.ids.session_id,
                user_id=request.ids.user_id,
                agent_id=request.ids.agent_id,
                folder=self.folder,
            )
            if await _store(ws, path, data) is None:
                found.append((index, message, text, path))
                sent_tokens += est.count_message(sent)
        if not found:
            return None
        shown = [t for t in offered if t is reader.schema or t is COMPACT_READER]
        reader_cost = 0 if _offers(reader, request.tools) else est.count_tools(shown)
        # What the fixed cost and the minimum need without these results, and so the room
        # they leave for the pointers, and for one page read back later: it will be the
        # newest result then (its header names the path), beside the read call (which
        # names it too) and a summary.
        rest = error.required_tokens - sent_tokens + reader_cost
        free = error.limit - rest
        room = max(0, free // len(found))
        replaced: dict[int, Message] = {}
        kept_head = False
        for index, message, text, path in found:
            per_token = len(text) / max(1, est.count(text))
            page_tokens = free - SUMMARY_ROOM - _PAGE_HEADER - 2 * est.count(path)
            page = max(_MIN_KEEP, min(len(text), int(0.8 * per_token * page_tokens)))
            pointer = self._pointer(text, path, page, 0)
            keep = 0
            if head:
                spare = room - est.count(pointer) - _PREVIEW_FRAMING
                keep = min(len(text) - 1, int(0.8 * per_token * spare)) if spare > 0 else 0
                if keep >= _MIN_HEAD:
                    pointer = self._pointer(text, path, page, keep)
                    kept_head = True
            replaced[index] = message.revise(
                "offload",
                metadata={"offloaded": path, "offloaded_chars": len(text)},
                content=pointer,
            )
        first = min(replaced)
        tail = tuple(replaced.get(i, history[i]) for i in range(first, len(history)))
        transforms = [
            Transform(NEWEST_RESULT_OFFLOAD, label(history[i].tool_call_id or history[i].id))
            for i in sorted(replaced)
        ]
        smaller = request.replace(history=history[:first] + tail, tools=offered)
        return smaller.with_transforms(*transforms), kept_head

    async def _reader_offered(
        self, request: ModelRequest, notes: _Notes | None, ws: Workspace | None, seen: bool
    ) -> bool:
        """Whether ``request`` offers ``read_file``: once the session has offloaded, always.

        ``seen``: this request offloaded a result, or a message looked at is a preview. A
        session's first look in this process (its notes are new) scanned the whole history;
        when that found nothing, the session's folder tells whether an earlier process
        offloaded (the history may have been summarised since): on a local or in-memory
        workspace by a stat on the event loop (a session's first round does not wait for a
        worker thread behind other sessions), elsewhere in a worker thread. The answer
        ``True`` is kept in the session's notes, so it never flips back.
        """
        reader = self._reader
        if reader is None or self.always_offer_read_file:
            return True
        if notes is None:
            return seen
        if notes.reader:
            return True
        if notes.reader is None and not seen and ws is not None:
            ids = request.ids
            folder = f"{self.folder}/{session_key(ids.session_id, ids.user_id, ids.agent_id)}"
            try:
                if ws.in_process:
                    seen = ws.exists(folder)
                else:
                    seen = await anyio.to_thread.run_sync(ws.exists, folder)
            except (OSError, WorkspaceError):
                seen = False
        notes.reader = seen
        return seen

    def _compact_reader(self, request: ModelRequest, notes: _Notes | None) -> bool:
        """Whether ``request`` offers the short ``read_file`` schema (`COMPACT_READER`).

        In a small window the full schema (~170 tokens) would take more than
        `COMPACT_READER_SHARE` of the input limit. Decided once per session (the session's
        notes keep it), so the tools the provider caches do not flip between the two.
        """
        reader = self._reader
        if reader is None:
            return False
        if notes is not None and notes.compact is not None:
            return notes.compact
        limit = request.input_limit
        compact = limit > 0 and request.estimator.count_tools((reader.schema,)) > (
            COMPACT_READER_SHARE * limit
        )
        if notes is not None:
            notes.compact = compact
        return compact

    def _tools_view(
        self, tools: tuple[ToolSchema, ...], *, compact: bool
    ) -> tuple[ToolSchema, ...]:
        """Return ``tools`` with this middleware's ``read_file`` short, or without it.

        The same tuple for the same ``tools`` each time (the accounting caches by identity).
        """
        reader = self._reader
        if reader is None:
            return tools
        key = (id(tools), compact)
        held = self._hidden.get(key)
        if held is not None and held[0] is tools:
            return held[1]
        schema = reader.schema
        if compact:
            kept = tuple(COMPACT_READER if t is schema else t for t in tools)
        else:
            kept = tuple(t for t in tools if t is not schema and t is not COMPACT_READER)
        if len(kept) == len(tools) and all(a is b for a, b in zip(kept, tools, strict=True)):
            kept = tools
        if len(self._hidden) >= 16:
            self._hidden.clear()
        self._hidden[key] = (tools, kept)
        return kept

    def _sweep_due(self, notes: _Notes, run: RunScope) -> bool:
        """Whether this call should sweep: at its first request, unless the folder is fresh.

        Synchronous (the call the session's notes last swept in) so a round that does not
        sweep awaits nothing here.
        """
        if self.max_age_s is None or notes.swept_in == run.run_id:
            return False
        notes.swept_in = run.run_id  # before awaiting: one sweep per call, even if it fails
        return True

    async def _sweep(self, ws: Workspace) -> None:
        # One sweep per folder per SWEEP_INTERVAL_S serves every call meanwhile: a burst of
        # calls must not each list the folder in a worker thread.
        max_age_s = self.max_age_s
        key, now = (str(ws.fs.protocol), ws.root, self.folder), time.monotonic()
        if max_age_s is None or now - _LAST_SWEEP.get(key, -SWEEP_INTERVAL_S) < SWEEP_INTERVAL_S:
            return
        if len(_LAST_SWEEP) >= 4096:
            _LAST_SWEEP.clear()  # at worst one extra sweep per folder
        _LAST_SWEEP[key] = now
        await anyio.to_thread.run_sync(lambda: sweep(ws, max_age_s=max_age_s, folder=self.folder))

    def _exempt(self, message: Message, names: dict[str, str] | None) -> bool:
        """Whether ``message`` is the result of an exempt tool (``names``: call id → tool)."""
        name = message.name
        if name is None and names is not None:
            name = names.get(message.tool_call_id or "")
        return name in self.exempt_tools

    def _session_folder(self, request: ModelRequest) -> str:
        ids = request.ids
        return f"{self.folder}/{session_key(ids.session_id, ids.user_id, ids.agent_id)}"

    def _image_too_big(self, part: ContentPart, found: Found, request: ModelRequest) -> bool:
        """Whether an inline image leaves the request: by its bytes, or by its tokens."""
        limit = self.max_image_bytes
        if limit is not None and decoded_size(found.payload) > limit:
            return True  # `offload_images` decodes it; a smaller real size is still big
        share, window = self.max_result_share, request.input_limit
        if share is None or window <= 0:
            return False
        rule = getattr(request.policy.estimator, "images", "bound")
        return image_tokens(part, rule) > share * window

    def _too_big(self, text: str, message: Message, request: ModelRequest) -> bool:
        if len(text) > self.max_result_chars:
            return True
        share, limit = self.max_result_share, request.input_limit
        if share is None or limit <= 0 or len(text) <= 2 * _MIN_KEEP:
            return False
        return request.estimator.count_message(message) > share * limit

    def _keep(self, text: str, request: ModelRequest, wanted: int | None) -> int:
        """Return the characters a preview keeps at each end: fewer when they cost too much."""
        if wanted is None:  # inline: something must be shown
            wanted = self.preview_chars or min(2_000, self.max_result_chars // 4)
        keep = min(wanted, max(0, (len(text) - 1) // 2))
        share, limit = self.max_result_share, request.input_limit
        if share is None or limit <= 0 or keep == 0:
            return keep
        cap = share * limit / 4
        count = request.estimator.count
        while keep > _MIN_KEEP and count(text[:keep]) + count(text[-keep:]) > cap:
            keep //= 2
        return keep

    def _inline_preview(self, text: str, reason: str, keep: int) -> str:
        total = len(text)
        return (
            f"[Tool result too long for the context: {total:,} characters. It could not be "
            f"saved to the workspace ({reason}), so only the first {keep:,} and the last "
            f"{keep:,} characters are shown; the middle (characters {keep:,}–{total - keep:,}) "
            "is not available. Run the tool again with narrower arguments if you need it.]\n"
            f"{text[:keep]}\n[… {total - 2 * keep:,} characters omitted …]\n{text[-keep:]}"
        )

    def _pointer(self, text: str, path: str, page: int, keep: int) -> str:
        """Return the short preview of a newest result offloaded to fit a small budget.

        The path is named once (two 128-bit keys cost ~40 tokens), with a page size that
        fits the context, and the first ``keep`` characters when there is room for them.
        """
        total = len(text)
        pointer = (
            f'[Tool result offloaded: {total:,} characters, too many for this context, saved to "{path}". '
            f"Read it with read_file, limit={page} per page (offset=0, then the next offset).]"
        )
        if keep == 0:
            return pointer
        return f"{pointer}\nThe first {keep:,} characters:\n{text[:keep]}"

    def _preview(self, text: str, path: str, keep: int) -> str:
        total = len(text)
        intro = (
            f"[Tool result offloaded: {total:,} characters, too long for the context, were "
            f'saved to the workspace file "{path}". '
        )
        how = (
            f'Read any part with read_file(path="{path}", offset=<first character>, '
            "limit=<number of characters>).]"
        )
        if keep == 0:
            return intro + how
        shown = (
            f"Shown below: the first {keep:,} and the last {keep:,} characters; the omitted "
            f"middle is characters {keep:,}–{total - keep:,}. "
        )
        omitted = f"\n[… {total - 2 * keep:,} characters omitted …]\n"
        return f"{intro}{shown}{how}\n{text[:keep]}{omitted}{text[-keep:]}"


# ------------------------------------------------------------------- helpers
def offload_path(
    message: Message,
    *,
    session_id: str,
    user_id: str = "",
    agent_id: str = "",
    data: bytes | None = None,
    folder: str = DEFAULT_FOLDER,
) -> str:
    """Return the workspace path the tool result ``message`` is offloaded to.

    ``<folder>/<key of user (or agent) and session>/<key of call id, message id and content>.txt``:
    two results never share a file, whatever their ids, and the same result always maps
    to the same file.

    Args:
        message: the tool result.
        session_id: the session's id.
        user_id: the user's id.
        agent_id: the agent's id (keys a session without a user id).
        data: the result's UTF-8 bytes, when already encoded.
        folder: the offload folder.
    """
    if data is None:
        data = message.text.encode("utf-8", "surrogatepass")
    content = hashlib.blake2b(data, digest_size=16).hexdigest()
    result = scope_key("result", message.tool_call_id or "", message.id, content)
    return f"{folder}/{session_key(session_id, user_id, agent_id)}/{result}.txt"


def purge_session(
    workspace: Workspace,
    session_id: str,
    *,
    user_id: str = "",
    agent_id: str = "",
    folder: str = DEFAULT_FOLDER,
) -> None:
    """Delete every offloaded result of a session (call it when a session is deleted)."""
    workspace.remove(f"{folder}/{session_key(session_id, user_id, agent_id)}", recursive=True)


def sweep(
    workspace: Workspace,
    *,
    max_age_s: float,
    folder: str = DEFAULT_FOLDER,
    now: float | None = None,
) -> int:
    """Delete offloaded results older than ``max_age_s`` seconds; return how many.

    Best effort: a file that vanishes or cannot be removed meanwhile is skipped (another
    process may be sweeping too), and an unreadable or misplaced folder is left alone; the
    next sweep tries again.
    """
    cutoff = (time.time() if now is None else now) - max_age_s
    removed = 0
    try:
        if not workspace.fs.isdir(workspace.resolve(folder)):
            return 0  # missing, or a file of the user's where the folder should be
        paths = workspace.list(folder, recursive=True)
    except (OSError, WorkspaceError):
        return 0
    for path in paths:
        try:
            if workspace.modified(path) < cutoff:
                workspace.remove(path)
                removed += 1
        except (OSError, WorkspaceError):
            continue
    return removed


async def _store(ws: Workspace, path: str, data: bytes) -> str | None:
    """Write ``data`` to ``path`` unless it already holds exactly these bytes.

    Returns:
        ``None`` when the file holds ``data``; otherwise why it could not be written (an
        errno name such as ``EROFS`` or ``ENOSPC``, else the error's class name).
    """

    def same_bytes_there() -> bool:
        full = ws.resolve(path)
        if not ws.fs.exists(full) or int(ws.fs.size(full)) != len(data):
            return False
        return bool(ws.read_bytes(path) == data)

    try:
        if not await anyio.to_thread.run_sync(same_bytes_there):
            await ws.awrite_bytes(path, data)
    except (OSError, WorkspaceError) as exc:
        return _reason(exc)
    return None


def _reason(exc: BaseException) -> str:
    """Return a short, prompt-free reason for a failed write (for the transform)."""
    for error in (exc, exc.__cause__):
        code = error.errno if isinstance(error, OSError) else None
        if code is not None and code in errno.errorcode:
            return errno.errorcode[code]
    return type(exc).__name__


def _done(metadata: dict[str, Any]) -> bool:
    """Whether a message with ``metadata`` already is an offload preview (written or inline)."""
    return metadata.get("offloaded") is not None or metadata.get("offload_failed") is not None


def _plain_text(message: Message) -> str | None:
    """Return the text of a message whose content is all text, else ``None``."""
    content = message.content
    if content is None or isinstance(content, str):
        return content
    if any(part.text is None for part in content):
        return None  # images or audio cannot be offloaded to a text file
    return message.text


def _offers(reader: Tool, tools: tuple[ToolSchema, ...]) -> bool:
    """Whether ``tools`` hold this middleware's ``read_file`` (full or short)."""
    return any(t is reader.schema or t is COMPACT_READER for t in tools)


def _call_names(history: tuple[Message, ...]) -> dict[str, str]:
    return {c.id: c.name for m in history if m.role == "assistant" for c in m.tool_calls}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Notes:
    """This middleware's notes on a session: the history it passed on last, the last sweep."""

    __slots__ = ("compact", "estimator", "history", "limit", "reader", "swept_in")

    def __init__(self) -> None:
        self.history: tuple[Message, ...] = ()
        """The history it passed on last: every message in it was decided …"""
        self.limit = -1
        """… under this input limit …"""
        self.estimator: object = None
        """… and this estimator (held, so its identity stays its own)."""
        self.swept_in = ""
        """The id of the agent call that swept the folder last."""
        self.compact: bool | None = None
        """Whether the session's requests offer the short ``read_file`` (``None``: not decided)."""
        self.reader: bool | None = None
        """Whether the session's requests offer ``read_file`` (``None``: not looked yet)."""

    def decided(self, request: ModelRequest) -> int:
        """Return how many leading messages of ``request``'s history need no new decision."""
        if request.input_limit != self.limit or request.policy.estimator is not self.estimator:
            return 0
        return shared_prefix(self.history, request.history, request.run)

    def passed_on(self, request: ModelRequest) -> None:
        """Remember ``request``'s history as decided."""
        self.history = request.history
        self.limit = request.input_limit
        self.estimator = request.policy.estimator
