"""SQLite's wal-index header, mapped: the lock-free sign that a database file changed.

Every connection to a WAL database, in any process, maps the same ``-shm`` file, and SQLite
rewrites its first 48 bytes at every commit. Reading them is a copy, no system call and no
lock, so the fragment-set cache (`harness.sessions.sqlite._set_cache`) tells on the event
loop that nothing was committed since it last looked. Kept apart because it reads SQLite's
file format directly and owns process-wide descriptors that are never closed.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import threading
from pathlib import Path
from typing import Final

WAL_HEADER: Final = 48
"""Bytes of the wal-index header (SQLite's file format: ``WalIndexHdr`` at the start of
``-shm``, machine byte order); its change counter ``iChange`` is the u32 at offset 8."""

_WAL_INDEXES: dict[tuple[int, int], tuple[int, mmap.mmap | None]] = {}
"""``-shm`` file (device, inode) → a descriptor and its header mapped, kept for the process."""
_WAL_INDEXES_LOCK = threading.Lock()
_MAX_WAL_INDEXES: Final = 64
"""Files beyond this many read the data version every time (descriptors stay bounded)."""


def changes(header: bytes) -> int:
    """Return the header's change counter (``iChange``, +1 per commit of any connection)."""
    return int.from_bytes(header[8:12], sys.byteorder)


def wal_index(path: Path) -> mmap.mmap | None:
    """Return ``path``'s wal-index header mapped read-only, or ``None`` where there is none.

    Called once the store's connection is open in WAL mode: the ``-shm`` file then exists
    and stays the same file, at least its first page long, while that connection is open
    (SQLite, which maps the same page itself, replaces or truncates it only when no
    connection has it open), so reading the mapping can fault only where SQLite's own
    reads would. The header is only read while the connection is open. A read is a copy of
    48 bytes: no system call (``pread`` cost 1–3 µs right after a commit).

    Descriptor and mapping are **never closed**: SQLite locks the file with POSIX locks,
    which closing any descriptor of it in the process would release for every connection
    of the process. So one of each per file and process, kept (an inode in use is never
    reused, so the key stays unique), at most `_MAX_WAL_INDEXES` files; those of files SQLite
    deleted meanwhile are closed whenever another file is mapped (`_drop_deleted`).
    """
    if os.name != "posix":
        return None  # elsewhere: the data version every time
    name = f"{path}-shm"
    try:
        found = os.stat(name)
    except OSError:
        return None
    key = (found.st_dev, found.st_ino)
    with _WAL_INDEXES_LOCK:
        kept = _WAL_INDEXES.get(key)
        if kept is not None:
            return kept[1]
        _drop_deleted()  # a new file: first let go of those SQLite deleted
        if len(_WAL_INDEXES) >= _MAX_WAL_INDEXES or found.st_size < WAL_HEADER:
            return None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        opened = os.fstat(fd)
        mapped: mmap.mmap | None = None
        with contextlib.suppress(OSError, ValueError):
            mapped = mmap.mmap(fd, WAL_HEADER, access=mmap.ACCESS_READ)
        _WAL_INDEXES[(opened.st_dev, opened.st_ino)] = (fd, mapped)  # fd kept open, even so
        return mapped if (opened.st_dev, opened.st_ino) == key else None


def _drop_deleted() -> None:
    """Close the kept descriptors and mappings of ``-shm`` files that were deleted (lock held).

    SQLite deletes a ``-shm`` file only when the last connection to its database, in any
    process, closes: nothing holds a lock on it any more, so closing ours releases none. A
    process that opens and drops many databases (tests, one file per tenant) keeps using the
    header, and its descriptors, instead of falling back once `_MAX_WAL_INDEXES` files were
    seen. One ``fstat`` per kept file, when a store opens a database.

    A deleted file can still be mapped by a live connection of this process when its
    database was deleted under a store: closing then releases this process's locks on a file
    no program can open again, and that store reports `harness.errors.StoreFileLost` at its
    next call (`harness.sessions.sqlite._file`), so nothing it commits is acknowledged.
    """
    for key, (fd, mapped) in list(_WAL_INDEXES.items()):
        try:
            deleted = os.fstat(fd).st_nlink == 0
        except OSError:
            deleted = True
        if deleted:
            del _WAL_INDEXES[key]
            if mapped is not None:
                mapped.close()
            with contextlib.suppress(OSError):
                os.close(fd)
