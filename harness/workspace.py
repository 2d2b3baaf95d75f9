"""The agent's workspace: a folder on any fsspec filesystem (a local folder by default).

It holds the agent's stable instructions (``AGENTS.md``), reference material (``MEMORY.md``,
``knowledge/``), long-term memory per scope (``memory/``, see `middleware.memory`) and
offloaded tool results (``large_tool_results/``). Every path is relative to the workspace
root and checked so that nothing — a model-supplied path, ``..``, an absolute path or a
symlink — can leave it.

Writes are atomic on a local folder: the bytes go to a temporary file with a unique name
next to the target, which then replaces it; a failed write removes its temporary file.
`Workspace.aupdate_text` is a read-change-write of one file that no concurrent writer in
the process (an anyio lock per file) or on the machine (``flock`` on the folder) can
interleave with, so no update is lost.

`Workspace.private` makes a fresh in-memory workspace that nobody else can reach; an agent
given no workspace gets one, so agents never share files by accident.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
import stat
import tempfile
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from harness.errors import PathEscapeError, WorkspaceError

if TYPE_CHECKING:
    import fsspec

try:  # POSIX only; elsewhere the in-process lock is the only one
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")

PRIVATE_PREFIX = "memory://context-harness-private"
"""Where `Workspace.private` workspaces live (one fresh sub-folder each)."""

_Key = tuple[str, str]
_ASYNC_LOCKS: RunVar[weakref.WeakValueDictionary[_Key, anyio.Lock]] = RunVar("workspace_locks")
"""Per event loop (an anyio lock belongs to one loop): one lock per file being updated."""
_THREAD_LOCKS = tuple(threading.Lock() for _ in range(64))
"""Striped locks for updates from several event loops or threads of one process."""


class ReadCheck(Protocol):
    """Decides whether a file may be read, from where it really is (see `Workspace.read_checked`)."""

    def __call__(self, relative: str, found: os.stat_result | None) -> None:
        """Raise `PathEscapeError` when the file at workspace path ``relative`` is refused.

        Args:
            relative: the workspace-relative path of the file's real location (symlinks
                resolved; on a local folder, the path of the file actually opened).
            found: the opened file's ``fstat`` (``None`` before opening and on a filesystem
                that is not local), for hard-link checks.
        """
        ...


def scope_key(kind: str, *parts: str) -> str:
    """Return a 32-hex-character folder name for the identity ``(kind, *parts)``.

    Ids (user, session, agent, tool call) may hold user data, path characters or anything
    a hostile caller chose, so they never become part of a path themselves: a 128-bit
    BLAKE2b of the length-prefixed parts does. Different kinds or splits of the same
    characters give different keys (``("ab", "c")`` ≠ ``("a", "bc")``).
    """
    digest = hashlib.blake2b(digest_size=16, person=b"ctx-harness")
    for piece in (kind, *parts):
        data = piece.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


class Workspace:
    """A rooted view of an fsspec filesystem.

    Args:
        location: a local path or an fsspec URL (``memory://ws``, ``s3://bucket/ws`` …).
        create: create the root folder when it does not exist.
        **storage_options: passed to fsspec for the URL's protocol.


    Raises:
        WorkspaceError: when the location is a file, or its folder cannot be created.
    """

    def __init__(
        self, location: str | os.PathLike[str], *, create: bool = True, **storage_options: Any
    ) -> None:
        # Imported here, not at module level: fsspec (and the asyncio it pulls in) costs
        # ~100 ms, paid only by a program that opens a workspace.
        import fsspec.core
        from fsspec.implementations.local import LocalFileSystem

        fs, root = fsspec.core.url_to_fs(os.fspath(location), **storage_options)
        self.fs: fsspec.AbstractFileSystem = fs
        self.local = isinstance(fs, LocalFileSystem)
        self.root = os.path.realpath(root) if self.local else root.rstrip("/")
        self.location = os.fspath(location)
        self.in_process = self.local or getattr(fs, "protocol", None) in ("memory", ("memory",))
        """Whether a stat is a call into this process or the local kernel (cheap enough for
        the event loop), not a request to a remote store."""
        self.is_private = False
        """Whether this is a `Workspace.private` scratch workspace."""
        if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
            raise WorkspaceError(
                f"the workspace {self.location!r} is a file, not a folder; give the path of a "
                "folder (it is created when missing)",
                location=self.location,
            )
        if create:
            try:
                fs.makedirs(self.root, exist_ok=True)
            except OSError as exc:
                raise WorkspaceError(
                    f"cannot create the workspace folder {self.location!r}: {exc}; give a folder "
                    "you can write to",
                    location=self.location,
                ) from exc

    @classmethod
    def private(cls) -> Workspace:
        """Return a fresh in-memory workspace that no other agent or caller can reach.

        Its files live in this process only and are deleted when the workspace object is
        garbage-collected; give the agent a real workspace to keep them.
        """
        workspace = cls(f"{PRIVATE_PREFIX}/{uuid.uuid4().hex}")
        workspace.is_private = True
        weakref.finalize(workspace, _remove_tree, workspace.fs, workspace.root)
        return workspace

    def __repr__(self) -> str:
        return f"Workspace({self.location!r})"

    # ------------------------------------------------------------------ paths
    def resolve(self, path: str) -> str:
        """Return the filesystem path of workspace-relative ``path``.

        Raises:
            PathEscapeError: when ``path`` is absolute, contains ``..`` or a NUL, or (on a
                local filesystem) resolves through a symlink to outside the workspace.
        """
        if not isinstance(path, str) or not path or "\x00" in path:
            raise PathEscapeError(
                f"invalid workspace path {path!r}: give a relative path such as 'notes/a.md'"
            )
        cleaned = path.replace("\\", "/")
        if (
            cleaned.startswith("/")
            or posixpath.isabs(cleaned)
            or (len(cleaned) > 1 and cleaned[1] == ":")
        ):
            raise PathEscapeError(
                f"absolute path {path!r} is not allowed: paths are relative to the workspace root"
            )
        parts = [p for p in cleaned.split("/") if p not in ("", ".")]
        if any(p == ".." for p in parts) or not parts:
            raise PathEscapeError(f"path {path!r} leaves the workspace: '..' is not allowed")
        full = (
            posixpath.join(self.root, *parts) if not self.local else os.path.join(self.root, *parts)
        )
        if self.local:
            real = os.path.realpath(full)
            if real != self.root and not real.startswith(self.root + os.sep):
                raise PathEscapeError(
                    f"path {path!r} resolves outside the workspace (through a symlink)"
                )
        return full

    def relative(self, full: str) -> str:
        """Return the workspace-relative form of a filesystem path inside the workspace."""
        rel = full[len(self.root) :].lstrip("/").lstrip(os.sep)
        return rel.replace(os.sep, "/")

    # -------------------------------------------------------------- sync I/O
    def exists(self, path: str) -> bool:
        """Return whether ``path`` exists in the workspace."""
        return bool(self.fs.exists(self.resolve(path)))

    def read_bytes(self, path: str) -> bytes:
        """Return the bytes of ``path``.

        Raises:
            WorkspaceError: when it does not exist or cannot be read.
        """
        full = self.resolve(path)
        try:
            data: bytes = self.fs.cat_file(full)
        except FileNotFoundError:
            raise WorkspaceError(
                f"{path!r} does not exist in the workspace {self.location!r}"
            ) from None
        except IsADirectoryError:
            raise WorkspaceError(f"{path!r} is a folder; give a file path") from None
        except OSError as exc:
            raise WorkspaceError(f"cannot read {path!r}: {exc}") from exc
        return data

    def read_text(self, path: str) -> str:
        """Return ``path`` decoded as UTF-8.

        Text written by `write_text` comes back exactly, lone surrogates included; a file
        with bytes that are not UTF-8 is decoded with those bytes replaced by U+FFFD.
        """
        data = self.read_bytes(path)
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return data.decode("utf-8", "replace")

    def read_checked(self, path: str, check: ReadCheck) -> bytes:
        """Return the bytes of ``path`` once ``check`` has accepted where the file really is.

        ``check`` sees the real workspace-relative location twice: before anything is opened
        (so a refused path gives the same answer whether or not it exists) and, on a local
        folder, for the file actually opened — found from the open descriptor itself
        (``/proc/self/fd`` on Linux, ``F_GETPATH`` on macOS), so a symlink swapped in between
        the check and the open cannot redirect the read. The last component is opened with
        ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a FIFO does not hang the tool); only regular files
        are read.

        Raises:
            PathEscapeError: ``path`` leaves the workspace or ``check`` refuses it.
            WorkspaceError: it does not exist, is a folder or cannot be read.
        """
        full = self.resolve(path)
        if not self.local:
            check(self.relative(full), None)
            return self.read_bytes(path)
        real = os.path.realpath(full)
        check(self.relative(real), None)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            fd = os.open(real, flags)
        except FileNotFoundError:
            raise WorkspaceError(
                f"{path!r} does not exist in the workspace {self.location!r}"
            ) from None
        except OSError as exc:  # a symlink swapped in (ELOOP), no permission …
            raise WorkspaceError(f"cannot read {path!r}: {exc}") from exc
        try:
            found = os.fstat(fd)
            if stat.S_ISDIR(found.st_mode):
                raise WorkspaceError(f"{path!r} is a folder; give a file path")
            if not stat.S_ISREG(found.st_mode):
                raise WorkspaceError(f"{path!r} is not a regular file; give the path of a file")
            opened = _opened_path(fd)
            if opened is None:  # no way to ask the descriptor: the path must still name it
                try:
                    same = os.path.samestat(found, os.stat(real, follow_symlinks=False))
                except OSError:
                    same = False
                if not same:
                    raise PathEscapeError(
                        f"{path!r} changed while it was being opened; read it again"
                    )
                opened = real
            if opened != self.root and not opened.startswith(self.root + os.sep):
                raise PathEscapeError(f"path {path!r} resolves outside the workspace")
            check(self.relative(opened), found)
            chunks: list[bytes] = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        except PathEscapeError:  # a PermissionError, so an OSError: not a read failure
            raise
        except OSError as exc:
            raise WorkspaceError(f"cannot read {path!r}: {exc}") from exc
        finally:
            os.close(fd)
        return b"".join(chunks)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically where the filesystem allows, creating folders.

        On a local folder the bytes go to a uniquely named temporary file beside the target
        that then replaces it, so readers see the old or the new file, never a part, and
        concurrent writers never share a temporary file. A failed write leaves nothing behind.

        Raises:
            WorkspaceError: when the file cannot be written (read-only or full filesystem,
                a file where a folder should be …), with the `OSError` as its cause.
        """
        full = self.resolve(path)
        parent = posixpath.dirname(full) if not self.local else os.path.dirname(full)
        try:
            self.fs.makedirs(parent, exist_ok=True)
            if self.local:
                _replace_atomically(full, data)
            else:
                self.fs.pipe_file(full, data)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot write {path!r} in the workspace {self.location!r}: {exc}; free space "
                "or make the folder writable",
                path=path,
            ) from exc

    def write_text(self, path: str, text: str) -> None:
        """Write ``text`` as UTF-8 to ``path``."""
        self.write_bytes(path, text.encode("utf-8", "surrogatepass"))

    def list(self, folder: str = "", *, recursive: bool = False) -> list[str]:
        """Return the workspace-relative paths of the files under ``folder``, sorted."""
        full = self.resolve(folder) if folder else self.root
        if not self.fs.exists(full):
            return []
        found = (
            self.fs.find(full)
            if recursive
            else [
                entry["name"] for entry in self.fs.ls(full, detail=True) if entry["type"] == "file"
            ]
        )
        return sorted(self.relative(str(name)) for name in found)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove ``path`` (a folder only with ``recursive``); missing paths are ignored."""
        full = self.resolve(path)
        if self.fs.exists(full):
            self.fs.rm(full, recursive=recursive)

    def modified(self, path: str) -> float:
        """Return the modification time of ``path`` as a Unix timestamp."""
        info = self.fs.info(self.resolve(path))
        mtime = info.get("mtime") or info.get("created") or 0.0
        return float(mtime.timestamp() if hasattr(mtime, "timestamp") else mtime)

    # ------------------------------------------------------------- async I/O
    async def aread_text(self, path: str) -> str:
        """Async `read_text` (runs in a worker thread)."""
        return await anyio.to_thread.run_sync(self.read_text, path)

    async def awrite_bytes(self, path: str, data: bytes) -> None:
        """Async `write_bytes` (runs in a worker thread)."""
        await anyio.to_thread.run_sync(self.write_bytes, path, data)

    async def aupdate_text(self, path: str, change: Callable[[str], tuple[str | None, T]]) -> T:
        """Read ``path``, apply ``change`` and write its result, with no writer in between.

        ``change`` receives the current text (``""`` when the file is missing) and returns
        ``(new text or None to leave the file alone, value)``; ``value`` is returned. Updates
        of one file are serialised in this process by an anyio lock (waiting tasks hold no
        worker thread), across event loops and threads by a striped thread lock and, on a
        local folder, across processes by ``flock`` on its folder.

        Raises:
            WorkspaceError: when the file cannot be read or written.
        """
        full = self.resolve(path)
        key = (str(self.fs.protocol), full)
        try:
            locks = _ASYNC_LOCKS.get()
        except LookupError:
            locks = weakref.WeakValueDictionary()
            _ASYNC_LOCKS.set(locks)
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = anyio.Lock()
        async with lock:
            return await anyio.to_thread.run_sync(self._update_text, path, full, change, key)

    def _update_text(
        self, path: str, full: str, change: Callable[[str], tuple[str | None, T]], key: _Key
    ) -> T:
        parent = os.path.dirname(full) if self.local else posixpath.dirname(full)
        try:
            self.fs.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise WorkspaceError(
                f"cannot create the folder of {path!r}: {exc}; make the workspace writable",
                path=path,
            ) from exc
        stripe = _THREAD_LOCKS[hash(key) % len(_THREAD_LOCKS)]
        with stripe, _folder_lock(parent if self.local else None):
            existing = self.read_text(path) if self.exists(path) else ""
            new, value = change(existing)
            if new is not None and new != existing:
                self.write_text(path, new)
            return value


_PROC_FDS = os.path.isdir("/proc/self/fd")
"""Whether the system names open files in ``/proc/self/fd`` (Linux)."""


def _opened_path(fd: int) -> str | None:
    """Return the real path of the file open on ``fd``, or ``None`` where it cannot be asked."""
    if _PROC_FDS:
        try:
            found = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        # A file removed since it was opened has no path left to check.
        return None if found.endswith(" (deleted)") or not found.startswith("/") else found
    get_path: int | None = getattr(fcntl, "F_GETPATH", None)  # macOS
    if get_path is not None:  # pragma: no cover - macOS
        try:
            raw = fcntl.fcntl(fd, get_path, b"\0" * 1024)
        except OSError:
            return None
        return os.fsdecode(raw.split(b"\0", 1)[0]) or None
    return None  # pragma: no cover - other systems: the caller compares stats


def _replace_atomically(full: str, data: bytes) -> None:
    """Write ``data`` to a unique temporary file beside ``full``, then move it into place."""
    folder, name = os.path.split(full)
    fd, tmp = tempfile.mkstemp(prefix=f".{name[:80]}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _folder_lock(folder: str | None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on a local folder (a no-op where there is none)."""
    if folder is None or fcntl is None:
        yield
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield  # the folder cannot be opened for locking: the in-process lock still holds
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _remove_tree(fs: fsspec.AbstractFileSystem, root: str) -> None:
    with contextlib.suppress(OSError, FileNotFoundError):
        fs.rm(root, recursive=True)


__all__ = ["PRIVATE_PREFIX", "ReadCheck", "Workspace", "scope_key"]
