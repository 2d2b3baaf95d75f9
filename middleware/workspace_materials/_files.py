"""The texts of a workspace's files, cached per workspace and re-read only when they change.

WorkspaceMaterials loads the same few files (``AGENTS.md``, ``MEMORY.md``, ``knowledge/…``)
for every agent call. Re-reading them in a worker thread per call made every call of a burst
queue behind the others for a thread. On a local folder a file's ``stat`` (inode, size,
modification and change time in ns) says whether it changed: a handful of stats costs
microseconds on the event loop, and only what changed is read again, in a worker thread of
its own (it never waits behind other thread users). When several calls find the same
change at once, one reads and the others wait for it.

A folder listing (``knowledge/``) is kept with the stat of each of its folders: adding,
removing or renaming a file changes its folder's stat, so the listing is walked again only
then.

Isolation: entries are keyed by the workspace and the file's path; a request only looks up
the paths it may read (its own user's memory file), so the cache gives no file to a request
that would not have read it. The cache is bounded (the oldest quarter goes when full).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Final

import anyio
import anyio.to_thread
import msgspec
from anyio.lowlevel import RunVar

from harness.errors import PathEscapeError, WorkspaceError
from harness.workspace import Workspace

Stamp = tuple[int, int, int, int]
"""What says a file changed: inode, size, modification and change time (ns)."""

FILE_LIMIT: Final = 8_192
"""Cached files per workspace (per-user memory files add one each)."""

_CACHES: weakref.WeakKeyDictionary[Workspace, WorkspaceFiles] = weakref.WeakKeyDictionary()
_REFRESHING: RunVar[dict[int, anyio.Event]] = RunVar("workspace_files_refreshing")
"""Per event loop: the refresh in flight for a cache (by id), which other calls wait for."""
_READER: RunVar[anyio.CapacityLimiter] = RunVar("workspace_files_reader")


class FileText(msgspec.Struct, frozen=True):
    """One file as last read."""

    stamp: Stamp | None
    """Its stat when read; ``None`` when it was missing."""
    text: str | None
    """Its text; ``None`` when missing, refused or unreadable."""
    problem: str | None = None
    """``refused`` (a symlink out of the workspace) or ``unreadable``."""


class Listing(msgspec.Struct, frozen=True):
    """One folder's files, recursively, with the stat of every folder in it."""

    files: tuple[str, ...]
    folders: tuple[tuple[str, Stamp | None], ...]


class WorkspaceFiles:
    """The cached files of one local workspace (get it with `workspace_files`)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.files: dict[str, FileText] = {}
        self.listings: dict[str, Listing] = {}
        self._writing = threading.Lock()  # the loop and a reader thread may both add entries

    # ------------------------------------------------------------------ reading
    def text(self, path: str) -> FileText:
        """Return ``path`` as last read (missing when never read)."""
        return self.files.get(path) or FileText(stamp=None, text=None)

    def listing(self, folder: str) -> tuple[str, ...]:
        """Return the files under ``folder`` as last listed."""
        found = self.listings.get(folder)
        return found.files if found is not None else ()

    # ------------------------------------------------------------------ checking
    def fresh(self, paths: Iterable[str], folders: Sequence[str]) -> bool:
        """Return whether every file of ``paths`` and ``folders`` is cached as it is now.

        Only stats, no reads: cheap enough for the event loop.
        """
        for folder in folders:
            listing = self.listings.get(folder)
            if listing is None or any(_stamp(full) != stamp for full, stamp in listing.folders):
                return False
            for path in listing.files:
                if not self._same(path):
                    return False
        return all(self._same(path) for path in paths)

    async def refresh(self, paths: Sequence[str], folders: Sequence[str]) -> None:
        """Read what changed in a worker thread; a refresh already running is waited for."""
        try:
            running = _REFRESHING.get()
        except LookupError:
            running = {}
            _REFRESHING.set(running)
        pending = running.get(id(self))
        if pending is not None:
            await pending.wait()
            if self.fresh(paths, folders):
                return
        done = running[id(self)] = anyio.Event()
        try:
            await anyio.to_thread.run_sync(self.update, paths, folders, limiter=_reader())
        finally:
            if running.get(id(self)) is done:
                del running[id(self)]
            done.set()

    def update(self, paths: Sequence[str], folders: Sequence[str]) -> None:
        """Re-list changed folders and re-read changed files (blocking: call it in a thread)."""
        wanted = list(paths)
        for folder in folders:
            listing = self.listings.get(folder)
            if listing is None or any(_stamp(full) != stamp for full, stamp in listing.folders):
                listing = self._list(folder)
                self.listings[folder] = listing
            wanted.extend(listing.files)
        for path in wanted:
            if not self._same(path):
                self._remember(path, self._read(path))

    # ------------------------------------------------------------------ private
    def _full(self, path: str) -> str:
        return os.path.join(self.workspace.root, *path.split("/"))

    def _same(self, path: str) -> bool:
        full = self._full(path)
        entry = self.files.get(path)
        if entry is not None:
            return entry.stamp == _stamp(full)
        if _nothing_at(full):  # never seen and missing (a new user's memory file): no read
            self._remember(path, FileText(stamp=None, text=None))
            return True
        return False

    def _read(self, path: str) -> FileText:
        stamp = _stamp(self._full(path))  # before reading: a change meanwhile is seen next time
        try:
            if not self.workspace.exists(path):
                return FileText(stamp=None, text=None)
            return FileText(stamp=stamp, text=self.workspace.read_text(path))
        except PathEscapeError:
            return FileText(stamp=stamp, text=None, problem="refused")
        except WorkspaceError:
            return FileText(stamp=stamp, text=None, problem="unreadable")

    def _list(self, folder: str) -> Listing:
        full = self._full(folder)
        try:
            files = self.workspace.list(folder, recursive=True)
        except (PathEscapeError, WorkspaceError, OSError):
            files = []
        walked = [full] + [
            os.path.join(top, name) for top, names, _ in os.walk(full) for name in names
        ]
        return Listing(files=tuple(files), folders=tuple((f, _stamp(f)) for f in walked))

    def _remember(self, path: str, entry: FileText) -> None:
        files = self.files
        with self._writing:
            if path not in files and len(files) >= FILE_LIMIT:
                for old in list(islice(files, FILE_LIMIT // 4)):
                    files.pop(old, None)
            files[path] = entry


def workspace_files(workspace: Workspace) -> WorkspaceFiles | None:
    """Return the file cache of ``workspace``, or ``None`` when it is not a local folder."""
    if not workspace.local:
        return None
    cache = _CACHES.get(workspace)
    if cache is None:
        cache = _CACHES[workspace] = WorkspaceFiles(workspace)
    return cache


def _reader() -> anyio.CapacityLimiter:
    """Return this event loop's limiter for cache reads (apart from the default one)."""
    try:
        return _READER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(4)
        _READER.set(limiter)
        return limiter


def _nothing_at(full: str) -> bool:
    """Return whether nothing, not even a broken symlink, is at ``full``."""
    try:
        os.lstat(full)
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return False


def _stamp(full: str) -> Stamp | None:
    try:
        st = os.stat(full)
    except (OSError, ValueError):
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
