"""What a session's ``read_file`` may open: an allow-list, checked where a file really is.

The workspace holds the project's material *and* the harness's own per-user data: the
session store (``.harness/sessions.db`` and its ``-wal``, ``-shm`` and ``-journal``),
every user's long-term memory (``memory/``) and every session's offloaded tool results.
A model that could page those files would read every user's history. So a read is allowed
only into one of three areas:

- **this session's offloads**: ``<offload folder>/<session_key(session, user)>/…``;
- **this user's memory**: ``<memory folder>/users/<key of the user>/…`` (for a session
  without a user id, ``<memory folder>/sessions/<key of agent and session>/…``), and the
  agent's shared memory ``<memory folder>/agents/<key of the agent>/…``, which the
  workspace-materials middleware shows every user of the agent anyway;
- **shared project material**: the folders given as ``shared`` (default: the whole
  workspace) outside the areas above.

And these are refused always, whatever the areas say:

- any path through a folder named ``.harness`` (the default store's folder);
- a folder named like a scope key (32 hex digits, `harness.workspace.scope_key`) that is
  not one of this session's own keys: that is how every per-user and per-session folder of
  the workspace is named, whatever its parent is called;
- a SQLite database, write-ahead log, shared-memory index or rollback journal, recognised
  by its first bytes or by its name beside a database, wherever it lies and whatever it is
  called (a copy or a hard link of the store included);
- a hard-linked file (``st_nlink > 1``) one of whose other names lies in the memory folder,
  the offload folder or ``.harness`` outside this session's own areas.

Every path is compared as it really is (symlinks and ``..`` resolved by
`harness.workspace.Workspace.read_checked`, which also checks the file actually opened),
component by component after Unicode NFC normalisation and case folding, with trailing
dots and spaces removed — so ``MEMORY/Users/…`` or ``.Harness/`` on a case-insensitive
filesystem is refused like the real name.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterator

from harness.errors import PathEscapeError
from harness.tools import ToolContext
from harness.workspace import Workspace, scope_key


def session_key(session_id: str, user_id: str = "", agent_id: str = "") -> str:
    """Return the folder name of a session in a private folder (32 hex characters).

    A 128-bit hash (`harness.workspace.scope_key`), so that no id (which may hold user data
    or path characters) ever becomes part of a path. A user's session is keyed by user and
    session id: two users who happen to use the same session id never share a folder. A
    session without a user id is its own scope: keyed by its agent and session id, so two
    agents' anonymous sessions with one session id never share a folder either.
    """
    if user_id:
        return scope_key("session", user_id, session_id)
    return scope_key("anonymous-session", agent_id, session_id)


STORE_FOLDER = ".harness"
"""The folder of the harness's own data in a workspace (the default session store)."""
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
"""Suffixes SQLite gives the files beside a database."""
_KEY = re.compile(r"[0-9a-f]{32}")
_SQLITE_MAGIC = (
    b"SQLite format 3\x00",  # a database
    b"\x37\x7f\x06\x82",  # a write-ahead log (little-endian checksums)
    b"\x37\x7f\x06\x83",  # a write-ahead log (big-endian checksums)
    b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7",  # a rollback journal
    (3007000).to_bytes(4, "little"),  # a WAL index (-shm), native byte order
    (3007000).to_bytes(4, "big"),
)
_MAX_LINK_SCAN = 100_000
"""The most files a hard-link check looks at before it refuses the read to be safe."""


def fold(part: str) -> str:
    """Return one path component as filesystems that ignore case or form compare it."""
    return unicodedata.normalize("NFC", part).casefold().rstrip(". ")


def folded_parts(path: str) -> tuple[str, ...]:
    """Return the folded components of a workspace-relative path."""
    return tuple(fold(p) for p in path.replace("\\", "/").split("/") if p not in ("", "."))


class ReadScope:
    """The areas one session may read (see the module docstring); a `ReadCheck`.

    Args:
        ws: the workspace read.
        ctx: the calling tool's context (user, agent and session ids).
        offload: the offload folder's components (``None``: no such folder).
        memory: the memory folder's components (``None``: no such folder).
        shared: the folders of shared project material (``()`` as one entry: everything).
    """

    def __init__(
        self,
        ws: Workspace,
        ctx: ToolContext,
        *,
        offload: tuple[str, ...] | None,
        memory: tuple[str, ...] | None,
        shared: tuple[tuple[str, ...], ...],
    ) -> None:
        self.ws = ws
        user, session = ctx.user_id, ctx.session_id
        key = ctx.run.key if ctx.run is not None else None
        agent = key.agent_id if key is not None else None
        self.offload = tuple(fold(p) for p in offload) if offload is not None else None
        self.memory = tuple(fold(p) for p in memory) if memory is not None else None
        self.shared = tuple(tuple(fold(p) for p in s) for s in shared)
        self.session_key = session_key(session, user, agent or "")
        """This session's folder in the offload folder."""
        own_memory: dict[str, str] = {}
        if user:
            own_memory["users"] = scope_key("user", user)
        elif agent is not None:
            own_memory["sessions"] = scope_key("session", agent, session)
        if agent is not None:
            own_memory["agents"] = scope_key("agent", agent)
        self.own_memory = own_memory
        """This session's memory folders: layout folder (``users`` …) → key."""

    def __call__(self, relative: str, found: os.stat_result | None) -> None:
        """Raise `PathEscapeError` unless this session may read the file at ``relative``."""
        parts = folded_parts(relative)
        self._check_parts(relative, parts)
        if found is not None and found.st_nlink > 1:
            self._check_links(relative, found)

    def check_content(self, relative: str, head: bytes) -> None:
        """Raise `PathEscapeError` when a file's first bytes or its name make it a database.

        Args:
            relative: the path the model asked for (for the message).
            head: the file's first bytes (at least 16 when the file has them).
        """
        if head.startswith(_SQLITE_MAGIC):
            raise PathEscapeError(
                f"{relative!r} is a SQLite database or one of its journals, which read_file "
                "never opens (session stores hold every user's history); read the "
                "conversation's own material instead"
            )

    # ------------------------------------------------------------------ internals
    def _check_parts(self, relative: str, parts: tuple[str, ...]) -> None:
        if STORE_FOLDER in parts:
            raise PathEscapeError(
                f"{relative!r} is in the harness's own data folder ({STORE_FOLDER}/, where "
                "the session store lives), which read_file never opens; read project "
                "files or this conversation's offloaded results"
            )
        if parts and parts[-1].endswith(SQLITE_SIDE_FILES):
            base = relative[: relative.rstrip("/").rfind("-")]
            if self._is_database(base):
                raise PathEscapeError(
                    f"{relative!r} belongs to a SQLite database (its journal or log), which "
                    "read_file never opens; read the conversation's own material instead"
                )
        if self.offload is not None and _under(parts, self.offload):
            n = len(self.offload)
            if len(parts) < n + 2 or parts[n] != self.session_key:
                raise PathEscapeError(
                    f"{relative!r} belongs to another session's offloaded results; read "
                    "only the paths given in this conversation"
                )
            return
        if self.memory is not None and _under(parts, self.memory):
            n = len(self.memory)
            if len(parts) < n + 3 or self.own_memory.get(parts[n]) != parts[n + 1]:
                raise PathEscapeError(
                    f"{relative!r} is long-term memory of another user or session, which "
                    "read_file does not open; the memory this conversation may see is "
                    "already in its context"
                )
            return
        for index, part in enumerate(parts[:-1]):
            if _KEY.fullmatch(part) and not self._own_key(parts[index - 1] if index else "", part):
                raise PathEscapeError(
                    f"{relative!r} is in a per-user or per-session folder that is not this "
                    "conversation's; read only the paths given in this conversation"
                )
        if not any(_under(parts, s) for s in self.shared):
            raise PathEscapeError(
                f"{relative!r} is not in the material this agent shares "
                f"({', '.join('/'.join(s) or '(all)' for s in self.shared) or 'none'}); "
                "read a file in one of those folders"
            )

    def _own_key(self, parent: str, key: str) -> bool:
        if parent in ("users", "sessions", "agents"):
            return self.own_memory.get(parent) == key
        return key == self.session_key

    def _is_database(self, relative: str) -> bool:
        """Return whether the workspace file ``relative`` starts like a SQLite database."""
        if not relative:
            return False
        try:
            full = self.ws.resolve(relative)
            with self.ws.fs.open(full, "rb") as fh:
                head: bytes = fh.read(16)
        except (OSError, PathEscapeError):
            return False
        return head.startswith(_SQLITE_MAGIC[0])

    def _check_links(self, relative: str, found: os.stat_result) -> None:
        """Refuse a hard link whose other names lie in an area of another session."""
        for name in self._protected_files():
            try:
                other = os.stat(name, follow_symlinks=False)
            except OSError:
                continue
            if not os.path.samestat(found, other):
                continue
            try:
                self._check_parts(relative, folded_parts(self.ws.relative(name)))
            except PathEscapeError:
                raise PathEscapeError(
                    f"{relative!r} is a hard link to a file of another user or session (or "
                    "of the session store), which read_file does not open; read only the "
                    "paths given in this conversation"
                ) from None

    def _protected_files(self) -> Iterator[str]:
        """Yield the files of the areas a hard link could reach into (capped, then refused)."""
        seen = 0
        for area in (self.memory, self.offload, (STORE_FOLDER,)):
            if area is None:
                continue
            top = os.path.join(self.ws.root, *area)
            for folder, _dirs, files in os.walk(top):
                for name in files:
                    seen += 1
                    if seen > _MAX_LINK_SCAN:
                        raise PathEscapeError(
                            "this hard-linked file cannot be checked against the workspace's "
                            "private folders (too many files); read a copy that is not a "
                            "hard link"
                        )
                    yield os.path.join(folder, name)


def _under(parts: tuple[str, ...], folder: tuple[str, ...]) -> bool:
    return parts[: len(folder)] == folder


__all__ = ["SQLITE_SIDE_FILES", "STORE_FOLDER", "ReadScope", "fold", "folded_parts"]
