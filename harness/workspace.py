"""The agent's workspace: a folder on any fsspec filesystem (a local folder by default).

It holds the agent's stable instructions (``AGENTS.md``), reference material (``MEMORY.md``,
``knowledge/``) and offloaded tool results (``large_tool_results/``). Every path is relative
to the workspace root and checked so that nothing — a model-supplied path, ``..``, an
absolute path or a symlink — can leave it.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

import anyio.to_thread
import fsspec
from fsspec.implementations.local import LocalFileSystem

from harness.errors import PathEscapeError, WorkspaceError


class Workspace:
    """A rooted view of an fsspec filesystem.

    Args:
        location: a local path or an fsspec URL (``memory://ws``, ``s3://bucket/ws`` …).
        create: create the root folder when it does not exist.
        **storage_options: passed to fsspec for the URL's protocol.
    """

    def __init__(
        self, location: str | os.PathLike[str], *, create: bool = True, **storage_options: Any
    ) -> None:
        fs, root = fsspec.core.url_to_fs(os.fspath(location), **storage_options)
        self.fs: fsspec.AbstractFileSystem = fs
        self.local = isinstance(fs, LocalFileSystem)
        self.root = os.path.realpath(root) if self.local else root.rstrip("/")
        if create:
            fs.makedirs(self.root, exist_ok=True)
        self.location = os.fspath(location)

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
        """Return ``path`` decoded as UTF-8 (invalid bytes replaced)."""
        return self.read_bytes(path).decode("utf-8", "replace")

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically where the filesystem allows, creating folders."""
        full = self.resolve(path)
        parent = posixpath.dirname(full) if not self.local else os.path.dirname(full)
        try:
            self.fs.makedirs(parent, exist_ok=True)
            if self.local:
                tmp = f"{full}.tmp-{os.getpid()}"
                with open(tmp, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, full)
            else:
                self.fs.pipe_file(full, data)
        except OSError as exc:
            raise WorkspaceError(f"cannot write {path!r}: {exc}") from exc

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
