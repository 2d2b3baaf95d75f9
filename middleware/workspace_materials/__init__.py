"""WorkspaceMaterials: stable instructions into System, workspace files as reference blocks.

Place in the stack: right after OverflowRetry, before ContextSources, so that the stable
instructions come first in System and every later layer (sources, task state, budget) sees
the workspace material as ordinary blocks.

What it adds, in this order:

- **System parts** (stable instructions): after the agent's own prompt (``prompt``) the
  workspace's ``AGENTS.md`` (part ``AGENTS.md``), then the named instructions given in code
  with `instruction` (parts ``instruction/<name>``), in registration order.
- **Reference blocks** (never System): the memory files that apply to this request
  (category ``memory``, see `middleware.memory`): the project's ``MEMORY.md``, the agent's
  shared memory and **this user's** own memory — never another user's; then extra
  ``context_files`` (category ``context``) and every file under ``knowledge/`` (category
  ``knowledge``, sorted by path). They are optional and low-priority, with manifest id
  ``workspace/<path>``, so BudgetFit drops them first when the request is short of room.

The files are read **once per agent call**: the first request of a call loads a snapshot
into this instance's slot of the call (``request.run.slot``) and every later request of that call reuses it, so editing
``AGENTS.md`` or ``MEMORY.md`` during a call changes nothing until the next call (use a
context source for data that must refresh every round). On a local folder the next call
does not read them again either unless they changed: their stats are checked on the event
loop and only changed files are read, in a worker thread (`middleware.workspace_materials._files`),
so a burst of calls starting at once does not queue for threads. A later round of the call
that brings the same System tuple gets the same joined tuple back (kept in the slot), so the
layers after it recognise System by identity instead of comparing its parts every round.

``max_context_tokens`` is a *load* budget for the reference files, not the request budget:
files are read in the order above until it is spent; the file that crosses it is cut to
fit and recorded as ``workspace_truncated:workspace/<path>``, files after it are left out
and recorded as ``workspace_omitted:workspace/<path>``. Instructions are never cut.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import ClassVar, Final, Protocol

import anyio.to_thread
import msgspec

from harness.blocks import ContextBlock
from harness.errors import ConfigurationError, PathEscapeError, WorkspaceError
from harness.manifest import Transform, TransformKind
from harness.request import ModelRequest, ModelResponse, RequestIds, SystemPart
from harness.tokens import TokenEstimator
from harness.types import Concern, Handler
from harness.workspace import Workspace
from middleware.memory import MEMORY_FOLDER, memory_path, visible_memory
from middleware.workspace_materials._files import FileText, workspace_files

WORKSPACE_MISSING: Final = TransformKind("workspace_missing")
"""A configured workspace file that is not there: ``workspace_missing:workspace/<path>``."""
WORKSPACE_LEFT_OUT: Final = TransformKind("workspace_omitted", omitted=True)
"""A workspace file left out: ``workspace_omitted:<source_id>``."""
WORKSPACE_TRUNCATED: Final = TransformKind("workspace_truncated")
"""A workspace file cut to its limit: ``workspace_truncated:<source_id>``."""
WORKSPACE_REFUSED: Final = TransformKind("workspace_refused")
"""A workspace file the workspace refused to read: ``workspace_refused:workspace/<path>``."""
WORKSPACE_UNREADABLE: Final = TransformKind("workspace_unreadable")
"""A workspace file that could not be read: ``workspace_unreadable:workspace/<path>``."""
_PROBLEMS: Final = {"refused": WORKSPACE_REFUSED, "unreadable": WORKSPACE_UNREADABLE}

DEFAULT_MAX_CONTEXT_TOKENS = 32_000
"""The default load budget for workspace reference files, in tokens."""
DEFAULT_PRIORITY = -100
"""Workspace reference blocks rank below ordinary optional material (priority 0)."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_CUT_NOTE = "\n[… cut: the workspace load budget (max_context_tokens) is spent …]"


class Instruction(msgspec.Struct, frozen=True, kw_only=True):
    """A named, trusted instruction added to System (build it with `instruction`)."""

    name: str
    """Unique name; the System part is ``instruction/<name>``."""
    text: str
    """The instruction text."""


def instruction(name: str, text: str) -> Instruction:
    """Return a named instruction for ``WorkspaceMaterials(instructions=[...])``.

    Args:
        name: unique name (letters, digits, ``_``, ``.``, ``-``).
        text: the trusted instruction text; it goes into System.

    Raises:
        ConfigurationError: for a bad name or a text that is not a non-empty string.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"instruction name {name!r} must be 1–64 letters, digits, '_', '.' or '-'"
        )
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"instruction {name!r} needs a non-empty text")
    return Instruction(name=name, text=text)


class _Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What one agent call loaded from the workspace."""

    system: tuple[SystemPart, ...]
    blocks: tuple[ContextBlock, ...]
    transforms: tuple[Transform, ...]


class _Held(msgspec.Struct):
    """This middleware's per-call slot: the snapshot once loaded, and the System it joined."""

    snapshot: _Snapshot | None = None
    base: tuple[SystemPart, ...] | None = None
    """The System tuple the last request brought (held, so its ``id`` stays its own) …"""
    joined: tuple[SystemPart, ...] = ()
    """… and it with the snapshot's parts: handed on again while requests bring ``base``,
    so the later layers' identity checks hold from round to round (a new tuple each round
    sent them to comparing the parts)."""


class WorkspaceMaterials:
    """Add the workspace's instructions to System and its files as reference blocks.

    Args:
        workspace: the workspace to read (a `Workspace`, a folder or an fsspec URL);
            default: the agent's workspace (``request.run.workspace``).
        instructions: named instructions from `instruction`, added to System after
            ``AGENTS.md`` in this order.
        context_files: extra workspace files to add as reference blocks (category
            ``context``), after ``MEMORY.md``.
        agents_file: the instructions file (``None``: do not read one).
        memory_file: the project's memory file, loaded for every user (``None``: do not
            read one).
        memory_folder: the folder of scoped memory (`harness.memory.memory_path`): the
            agent's shared file and the requesting user's own file are loaded from it
            (``None``: load neither).
        knowledge_dir: the folder of knowledge files (``None``: do not read one).
        max_context_tokens: the load budget for reference files (``None``: unlimited).
        priority: the selection priority of the reference blocks.

    Raises:
        ConfigurationError: for duplicate instruction names, a bad path or a bad budget.
    """

    concerns: ClassVar[frozenset[Concern]] = frozenset({Concern.ADDS_CONTEXT})
    after: ClassVar[frozenset[Concern]] = frozenset()

    def __init__(
        self,
        *,
        workspace: Workspace | str | os.PathLike[str] | None = None,
        instructions: Iterable[Instruction] = (),
        context_files: Iterable[str] = (),
        agents_file: str | None = "AGENTS.md",
        memory_file: str | None = "MEMORY.md",
        memory_folder: str | None = MEMORY_FOLDER,
        knowledge_dir: str | None = "knowledge",
        max_context_tokens: int | None = DEFAULT_MAX_CONTEXT_TOKENS,
        priority: int = DEFAULT_PRIORITY,
    ) -> None:
        self.workspace = (
            workspace
            if workspace is None or isinstance(workspace, Workspace)
            else Workspace(workspace)
        )
        named: list[Instruction] = []
        for position, item in enumerate(instructions):
            if not isinstance(item, Instruction):
                raise ConfigurationError(
                    f"instructions[{position}] is {item!r}; build instructions with "
                    "instruction(name, text)"
                )
            if any(existing.name == item.name for existing in named):
                raise ConfigurationError(
                    f"two instructions are named {item.name!r}; instruction names must be unique"
                )
            named.append(item)
        self.instructions: tuple[Instruction, ...] = tuple(named)
        if isinstance(context_files, str):
            raise ConfigurationError(
                f"context_files must be a list of paths, not the string {context_files!r}"
            )
        self.context_files = tuple(context_files)
        for path in (*self.context_files, agents_file, memory_file, memory_folder, knowledge_dir):
            if path is not None:
                _check_path(path)
        self.agents_file = agents_file
        self.memory_file = memory_file
        self.memory_folder = memory_folder
        self.knowledge_dir = knowledge_dir
        if max_context_tokens is not None and (
            isinstance(max_context_tokens, bool)
            or not isinstance(max_context_tokens, int)
            or max_context_tokens < 0
        ):
            raise ConfigurationError(
                f"max_context_tokens must be an int ≥ 0 or None, got {max_context_tokens!r}"
            )
        self.max_context_tokens = max_context_tokens
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigurationError(f"priority must be an int, got {priority!r}")
        self.priority = priority

    def __repr__(self) -> str:
        return (
            f"WorkspaceMaterials(workspace={self.workspace!r}, "
            f"instructions={[i.name for i in self.instructions]!r}, "
            f"max_context_tokens={self.max_context_tokens!r})"
        )

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Add this call's workspace snapshot to ``request`` and pass it on."""
        held = request.run.slot(self, _Held) if request.run is not None else None
        snapshot = held.snapshot if held is not None else None  # after the call's first round
        if snapshot is None:
            snapshot = await self.snapshot(request)
        if snapshot.system or snapshot.blocks or snapshot.transforms:
            system = request.system
            if held is None:
                system += snapshot.system
            elif held.base is system:  # the agent's own System tuple, again
                system = held.joined
            else:
                held.base, held.joined = system, system + snapshot.system
                system = held.joined
            request = request.replace(
                system=system,
                blocks=request.blocks + snapshot.blocks,
                transforms=request.transforms + snapshot.transforms,
            )
        return await call_next(request)

    async def snapshot(self, request: ModelRequest) -> _Snapshot:
        """Return this agent call's snapshot, loading it on the call's first request."""
        held: _Held | None = request.run.slot(self, _Held) if request.run is not None else None
        if held is not None and held.snapshot is not None:
            return held.snapshot
        workspace = self.workspace
        if workspace is None and request.run is not None:
            workspace = request.run.workspace
        loaded = await self._load(workspace, request.estimator, request.ids)
        if held is not None:
            held.snapshot = loaded
        return loaded

    # ------------------------------------------------------------------ loading
    async def _load(
        self, workspace: Workspace | None, estimator: TokenEstimator, ids: RequestIds
    ) -> _Snapshot:
        """Load the snapshot: from the file cache on a local folder, else by reading.

        A local folder's files are checked by their stat on the event loop and only changed
        ones are read (in a worker thread, see `middleware.workspace_materials._files`); an in-memory
        workspace is read on the loop (no I/O); any other filesystem in a worker thread.
        """
        if workspace is None:
            return self._build(None, estimator, ids)
        files = workspace_files(workspace)
        if files is not None:
            paths, folders = self._paths(ids), self._folders()
            if not files.fresh(paths, folders):
                await files.refresh(paths, folders)
            return self._build(files, estimator, ids)
        direct = _Direct(workspace)
        if _in_memory(workspace):
            return self._build(direct, estimator, ids)
        return await anyio.to_thread.run_sync(self._build, direct, estimator, ids)

    def _paths(self, ids: RequestIds) -> list[str]:
        """Return the single files this request may load, in load order."""
        paths = [p for p in (self.agents_file, self.memory_file) if p is not None]
        if self.memory_folder is not None:
            paths.extend(
                memory_path(scope, ids, folder=self.memory_folder) for scope in ("agent", "user")
            )
        paths.extend(self.context_files)
        return paths

    def _folders(self) -> list[str]:
        return [self.knowledge_dir] if self.knowledge_dir is not None else []

    def _build(
        self, source: _Source | None, estimator: TokenEstimator, ids: RequestIds
    ) -> _Snapshot:
        system: list[SystemPart] = []
        transforms: list[Transform] = []
        if source is not None and self.agents_file is not None:
            text = _text(source.text(self.agents_file), self.agents_file, transforms)
            if text is not None and text.strip():
                system.append(SystemPart(name=self.agents_file, text=text))
        system.extend(
            SystemPart(name=f"instruction/{i.name}", text=i.text) for i in self.instructions
        )
        if source is None:
            return _Snapshot(system=tuple(system), blocks=(), transforms=tuple(transforms))

        wanted: list[tuple[str, str]] = []
        if self.memory_file is not None:
            wanted.append((self.memory_file, "memory"))
        if self.memory_folder is not None:
            wanted.extend(
                (memory_path(scope, ids, folder=self.memory_folder), "memory")
                for scope in ("agent", "user")
            )
        for path in self.context_files:
            wanted.append((path, "context"))
            if not _exists(source.text(path)):
                transforms.append(Transform(WORKSPACE_MISSING, f"workspace/{path}"))
        if self.knowledge_dir is not None:
            wanted.extend((path, "knowledge") for path in source.listing(self.knowledge_dir))

        blocks: list[ContextBlock] = []
        left = self.max_context_tokens
        for path, category in wanted:
            source_id = f"workspace/{path}"
            file = source.text(path)
            if left is not None and left <= 0:
                if _exists(file):
                    transforms.append(Transform(WORKSPACE_LEFT_OUT, source_id))
                continue
            text = _text(file, path, transforms)
            if category == "memory" and text is not None:
                text = visible_memory(text, ids.session_id)  # not its own compactions' facts
            if text is None or not text.strip():
                continue
            if left is not None:
                tokens = estimator.count(text)
                if tokens > left:
                    text = _cut(text, left, estimator)
                    transforms.append(Transform(WORKSPACE_TRUNCATED, source_id))
                    left = 0
                else:
                    left -= tokens
            blocks.append(
                ContextBlock.reference(
                    path, text, category=category, priority=self.priority, source_id=source_id
                )
            )
        return _Snapshot(system=tuple(system), blocks=tuple(blocks), transforms=tuple(transforms))


class _Source(Protocol):
    """Where a snapshot's files come from: the local file cache, or the workspace directly."""

    def text(self, path: str) -> FileText: ...

    def listing(self, folder: str) -> tuple[str, ...]: ...


class _Direct:
    """Reads the workspace on every call (filesystems other than a local folder)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def text(self, path: str) -> FileText:
        try:
            if not self.workspace.exists(path):
                return FileText(stamp=None, text=None)
            return FileText(stamp=None, text=self.workspace.read_text(path))
        except PathEscapeError:
            return FileText(stamp=None, text=None, problem="refused")
        except WorkspaceError:
            return FileText(stamp=None, text=None, problem="unreadable")

    def listing(self, folder: str) -> tuple[str, ...]:
        return tuple(self.workspace.list(folder, recursive=True))


def _in_memory(workspace: Workspace) -> bool:
    protocol = workspace.fs.protocol
    return "memory" in (protocol if isinstance(protocol, tuple) else (protocol,))


def _exists(file: FileText) -> bool:
    """Whether the file is there (an unreadable one is; one refused is not)."""
    return file.text is not None or file.problem == "unreadable"


def _text(file: FileText, path: str, transforms: list[Transform]) -> str | None:
    """Return a file's text, recording why there is none when it was refused or unreadable."""
    if file.problem is not None:
        transforms.append(Transform(_PROBLEMS[file.problem], f"workspace/{path}"))
    return file.text


def _check_path(path: object) -> None:
    if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
        raise ConfigurationError(
            f"workspace path {path!r} must be a relative path inside the workspace, "
            "such as 'docs/guide.md'"
        )


def _cut(text: str, budget: int, estimator: TokenEstimator) -> str:
    """Return the longest head of ``text`` that, with the cut note, fits ``budget`` tokens."""
    room = budget - estimator.count(_CUT_NOTE)
    if room <= 0:
        return _CUT_NOTE.lstrip("\n")
    low, high = 0, len(text)
    while low < high:  # binary search on the head length; counts are monotone enough
        middle = (low + high + 1) // 2
        if estimator.count(text[:middle]) <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low] + _CUT_NOTE
