"""Whether a SQLite store's database file is still the one at its path.

A connection keeps writing to the file it opened. When that file is deleted (a workspace
removed under a running agent) or replaced (a backup moved over it), every commit still
"succeeds" — into a file no one will open again. `OpenedFile` remembers the identity
(device, inode) of the database and of its write-ahead log when the store opens them, and
`OpenedFile.check` compares it with what is at the paths now, after every piece of work
the store ran on its connection: a commit that went to a lost file is reported to its
caller as `StoreFileLost`, never acknowledged. Two ``stat`` calls, no descriptor: closing
any descriptor of the database would release the process's POSIX locks on it
(`harness.sessions._sqlite_url.check_file`).

The WAL is checked too: while a store's connection is open, SQLite deletes or recreates
the ``-wal`` file only when its locks say no other connection uses the database. A WAL that
vanished anyway was removed by another program — or another program was misled into it
because this process lost its locks (a plain ``open`` and ``close`` of the database file
anywhere in the process). Either way the store's commits since went to a deleted file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from harness.errors import StoreFileLost

FileId = tuple[int, int]
"""A file's (device, inode)."""


def identity(path: Path | str) -> FileId | None:
    """Return the (device, inode) of the file at ``path``, or ``None`` when there is none."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return found.st_dev, found.st_ino


class OpenedFile:
    """The database file and WAL a store's connection opened, by identity."""

    def __init__(self, path: Path, *, before: FileId | None) -> None:
        """Take the identities of ``path`` and its ``-wal`` now (right after the connection opened).

        ``before`` is the database's identity taken before the connection opened it (``None``
        when there was no file yet): a file swapped in between is refused.

        Raises:
            StoreFileLost: the database file is already gone, or not the one seen before.
        """
        self.path = path
        self.wal_path = f"{path}-wal"
        found = identity(path)
        if found is None or (before is not None and found != before):
            reason: Literal["deleted", "replaced"] = "deleted" if found is None else "replaced"
            raise _lost(path, self.wal_path, self.path, reason, opening=True)
        self.database: FileId = found
        self.wal: FileId | None = identity(self.wal_path)
        """``None`` until SQLite has made the WAL (then taken at the next `check`)."""

    def check(self, *, wal_too: bool = True) -> None:
        """Raise `StoreFileLost` when the database (or its WAL) is no longer the file opened.

        The store checks the database before its work (so nothing is written to a lost one)
        and both files after it (so a commit that landed in either is reported).
        """
        found = identity(self.path)
        if found != self.database:
            raise _lost(
                self.path, self.wal_path, self.path, "deleted" if found is None else "replaced"
            )
        if not wal_too:
            return
        wal = identity(self.wal_path)
        if self.wal is None:
            self.wal = wal
        elif wal != self.wal:
            raise _lost(
                self.path, self.wal_path, self.wal_path, "deleted" if wal is None else "replaced"
            )


def _lost(
    path: Path,
    wal_path: str,
    changed: Path | str,
    reason: Literal["deleted", "replaced"],
    *,
    opening: bool = False,
) -> StoreFileLost:
    happened = "was deleted" if reason == "deleted" else "was replaced by another file"
    if opening:
        return StoreFileLost(
            f"the session database {path} {happened} while the store was opening it; "
            "nothing was read or written. Open the store again.",
            path=str(changed),
            reason=reason,
        )
    if changed == path:
        what = f"the session database {path} {happened} while this store had it open"
        where = "the file that was at that path"
    else:
        what = (
            f"the write-ahead log {wal_path} of the session database {path} {happened} while "
            "this store had it open (another program removed it, or code in this process "
            "opened and closed the database file with a plain descriptor, which releases "
            "SQLite's locks)"
        )
        where = "the database file if the log was checkpointed before it went (SQLite does that)"
    return StoreFileLost(
        f"{what}: this call's work went to the lost file and is NOT stored at {path}; "
        "nothing more is written there by this store. Rounds committed earlier are in "
        f"{where}: restore it from a backup if it was deleted, then close this store, open "
        "a new one and load the session again (the caller's last round must be committed "
        "again).",
        path=str(changed),
        reason=reason,
    )
