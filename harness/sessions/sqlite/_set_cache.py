"""The SQLite store's cache of fragment sets, and how it tells on the event loop that it holds.

FragmentEditor reads the session's and the project's fragment sets before every request.
`SetCache` repeats the last answer while nothing was written (the wal-index header,
`harness.sessions.sqlite._wal_index`, and the connection's data version say so without a
lock), else checks each set's row (`Stamp`) through a read-only connection of its own, and
reads a set's fragments only when its row moved. Kept apart from the store because its
correctness rests on SQLite's locking and file format, spelled out in `SetCache`.
"""

from __future__ import annotations

import mmap
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Final

from harness.fragments.model import Fragment, FragmentScope
from harness.sessions._rows import Stamp
from harness.sessions.sqlite._fragments import fragments_of_set, set_stamp
from harness.sessions.sqlite._wal_index import WAL_HEADER, changes

_Answer = tuple[tuple[int, int], tuple[FragmentScope, ...], list[tuple[int, list[Fragment]]]]
"""A generation, the scopes answered at it, and the answer (its lists `SetCache.known`'s)."""


class SetCache:
    """Fragment sets read before, kept with the stamp of the set's row they were read at.

    Two checks, both on the event loop, neither waiting for a lock:

    - **Nothing written since the last look** — the *generation*: ``PRAGMA data_version``
      on the store's own connection (SQLite moves it for every commit by *another*
      connection, any process, and never for this connection's own commits, so the
      session's per-round commits leave it alone) and `writes`, which temporary triggers on
      that connection bump for every row it writes to ``fragment_sets`` (a set's every
      change rewrites its row). At the generation of the last look, the answers then given
      (`known`, absent sets included) still hold: one statement and no probe (~2× cheaper
      than one row look-up, whose pages every commit evicts from the probe's cache). The
      generation is read under the store's lock (never mid-transaction of its own) and
      before the rows, so an answer is only ever recorded at a generation no newer than it.
    - **Else each set's row** (`Stamp`) through a read-only connection of its own: in WAL
      mode a reader never waits for a writer, so it cannot stall the loop behind the
      store's lock. A set at the stamp it was cached at is answered from the cache.

    The data version itself costs a read transaction (~14 µs right after a commit: SQLite
    takes and moves a read mark in the wal-index with file-lock calls). So `clean` keeps the
    version with the **wal-index header** it was read at (`header`: 48 bytes of the ``-shm``
    file, mapped, `wal_index`; SQLite rewrites them at every commit of any connection, and
    every connection of the file, in any process, maps that same shared file — it is how
    SQLite itself tells that the database changed). While the header is the same,
    nothing committed and the version is the one kept. The header is read before the
    version, so a commit between the two moves the header away from what was kept (read
    again next time), never hides behind it. The store's own round commits keep `clean`
    current (`committed`): inside the write transaction no one else can commit, and the
    header's change counter (``iChange``, +1 per commit) tells whether anyone committed
    between that commit and the header read after it. Any other commit of its own moves the
    header, and the version is read again.

    The answer repeated most (`last`: the same scopes, same generation) is given without
    any lock: `last`, `clean` and `writes` are read first, the header last — a commit after
    those reads moves the header, and an own fragment write under way has already counted
    in `writes` (its triggers run before it commits), so either one is seen.

    A scope with no row has no fragments. At most ``MAX_SETS`` sets are kept, the least
    recently used dropped. Keys are full scopes (user, agent, session or project), so one
    process serving many users never mixes them. An in-memory store (``sqlite://``) has no
    second connection: it reads in the worker.
    """

    MAX_SETS: Final = 4096

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.probe: sqlite3.Connection | None = None
        self.lock = threading.Lock()
        """Guards the probe and the cached sets (the event loop never waits for it)."""
        self.fragments: OrderedDict[FragmentScope, tuple[Stamp, list[Fragment]]] = OrderedDict()
        self.writes = 0
        """Rows of ``fragment_sets`` the store's connection wrote (its temporary triggers)."""
        self.generation: tuple[int, int] | None = None
        """(data version, writes) when `known` was answered."""
        self.known: dict[FragmentScope, tuple[int, list[Fragment]]] = {}
        """What each scope was answered at `generation`."""
        self.last: _Answer | None = None
        """The last answer from `known` (one value: the event loop reads it without a lock)."""
        self.shm: mmap.mmap | None = None
        """The file's wal-index header, mapped (`wal_index`; ``None``: none to read)."""
        self.clean: tuple[bytes, int] | None = None
        """(wal-index header, the connection's data version) read in that order."""

    def header(self) -> bytes | None:
        """Return the wal-index header (moves with every commit), or ``None``."""
        shm = self.shm  # once: `close` may drop it from another thread
        if shm is None:
            return None
        try:
            return shm[:WAL_HEADER]
        except ValueError:  # closed: its file was deleted (`wal_index`)
            return None

    def committed(self, before: bytes | None) -> None:
        """Carry `clean` over the store's own commit (its lock held, right after it).

        ``before`` is the header read inside the committed write transaction. The version is
        still the one kept when nothing committed before that transaction (``before`` is the
        kept header) and the commit alone moved the counter after it. The caller's commit
        must have written (a round's always rewrites the session row's version): a commit
        that wrote nothing leaves the counter, and another connection's commit would then
        pass for it.
        """
        clean, after = self.clean, self.header()
        if (
            clean is None
            or before is None
            or after is None
            or clean[0] != before
            or changes(after) != (changes(before) + 1) & 0xFFFFFFFF
        ):
            self.clean = None
        else:
            self.clean = (after, clean[1])

    def watch(self, conn: sqlite3.Connection) -> None:
        """Count ``conn``'s own writes to ``fragment_sets``.

        Temporary triggers: they live in this connection only, nothing is added to the
        file, so other programs that write it need nothing.
        """
        conn.create_function("harness_fragment_sets_written", 0, self._written)
        for op in ("INSERT", "UPDATE", "DELETE"):
            conn.execute(
                f"CREATE TEMP TRIGGER IF NOT EXISTS harness_fragment_sets_{op.lower()} "
                f"AFTER {op} ON main.fragment_sets "
                "BEGIN SELECT harness_fragment_sets_written(); END"
            )

    def _written(self) -> None:
        self.writes += 1  # the store's connection, under its lock

    def answer(
        self,
        scopes: tuple[FragmentScope, ...],
        main: sqlite3.Connection | None,
        main_lock: threading.Lock,
    ) -> list[tuple[int, list[Fragment]]] | None:
        """Return every scope's set from the cache (event loop), or ``None`` to read them.

        ``main`` is the store's connection (``main_lock`` its lock): the probe opens only
        after it did (and migrated).
        """
        if self.path is None or main is None:
            return None
        repeated = self.repeated(scopes)
        if repeated is not None:
            return [(version, list(found)) for version, found in repeated]
        generation = _generation(main, main_lock, self)
        if not self.lock.acquire(blocking=False):
            return None
        try:
            if generation is not None and generation == self.generation:
                out = self._known(scopes)
                if out is not None:
                    self.last = (generation, scopes, out)
                    return [(version, list(found)) for version, found in out]
            out = self._probe(self.path, scopes)
            if out is not None and generation is not None:
                if generation != self.generation:
                    self.generation, self.known = generation, {}
                if len(self.known) + len(scopes) > self.MAX_SETS:
                    self.known.clear()
                for scope, found in zip(scopes, out, strict=True):
                    self.known[scope] = (found[0], list(found[1]))
            return out
        except sqlite3.Error:
            return None  # busy, locked, …: the worker's read reports what is wrong
        finally:
            self.lock.release()

    def repeated(
        self, scopes: tuple[FragmentScope, ...]
    ) -> list[tuple[int, list[Fragment]]] | None:
        """Return the last answer when it is for ``scopes`` and still current, else ``None``.

        No lock (`last`, `clean` and `writes` read first, the header last) and no copy: the
        lists are `known`'s, to read only.
        """
        last, clean = self.last, self.clean
        if (
            last is not None
            and clean is not None
            and last[1] == scopes
            and last[0][0] == clean[1]
            and last[0][1] == self.writes
            and self.header() == clean[0]  # nothing committed since `clean`
        ):
            return last[2]
        return None

    def _known(self, scopes: tuple[FragmentScope, ...]) -> list[tuple[int, list[Fragment]]] | None:
        out: list[tuple[int, list[Fragment]]] = []
        for scope in scopes:
            found = self.known.get(scope)
            if found is None:
                return None
            out.append(found)
        return out

    def _probe(
        self, path: Path, scopes: tuple[FragmentScope, ...]
    ) -> list[tuple[int, list[Fragment]]] | None:
        """Look each set's row up through the probe (lock held); ``None``: one must be read."""
        if self.probe is None:
            self.probe = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self.probe.execute("PRAGMA query_only = ON")
        out: list[tuple[int, list[Fragment]]] = []
        for scope in scopes:
            stamp = set_stamp(self.probe, scope)
            if stamp is None:
                out.append((0, []))
                continue
            cached = self.fragments.get(scope)
            if cached is None or cached[0] != stamp:
                return None
            self.fragments.move_to_end(scope)
            out.append((stamp[1], list(cached[1])))
        return out

    def read(
        self, conn: sqlite3.Connection, scopes: tuple[FragmentScope, ...]
    ) -> list[tuple[int, list[Fragment]]]:
        """Read the sets in one read transaction and cache them (worker thread, lock held)."""
        conn.execute("BEGIN")
        try:
            out: list[tuple[int, list[Fragment]]] = []
            for scope in scopes:
                stamp = set_stamp(conn, scope)
                if stamp is None:
                    out.append((0, []))
                    continue
                with self.lock:
                    cached = self.fragments.get(scope)
                if cached is None or cached[0] != stamp:
                    cached = (stamp, fragments_of_set(conn, stamp[0]))
                if self.path is not None:
                    with self.lock:
                        self.fragments[scope] = cached
                        self.fragments.move_to_end(scope)
                        while len(self.fragments) > self.MAX_SETS:
                            self.fragments.popitem(last=False)
                out.append((stamp[1], list(cached[1])))
        finally:
            conn.commit()
        return out

    def wrote(
        self, scope: FragmentScope, old: Stamp | None, new: Stamp, written: list[Fragment]
    ) -> None:
        """Bring a cached set up to this store's own write (worker thread, after the commit).

        A write changes a few fragments of a set that may hold thousands: the next read then
        finds the new stamp cached instead of reading and decoding the whole set again. A
        fragment new to the set has the highest row id, so it goes last, as a read orders it.
        """
        with self.lock:
            cached = self.fragments.get(scope)
            if cached is None or cached[0] != old:
                return
            fragments = list(cached[1])
            where = {f.id: i for i, f in enumerate(fragments)}
            for fragment in written:
                at = where.get(fragment.id)
                if at is None:
                    where[fragment.id] = len(fragments)
                    fragments.append(fragment)
                else:
                    fragments[at] = fragment
            self.fragments[scope] = (new, fragments)

    def close(self) -> None:
        """Close the probe connection and forget the sets."""
        with self.lock:
            if self.probe is not None:
                self.probe.close()
                self.probe = None
            self.fragments.clear()
            self.generation, self.known, self.last = None, {}, None
            self.clean, self.shm = None, None  # the descriptor stays open: `wal_index`


def _generation(
    main: sqlite3.Connection, main_lock: threading.Lock, sets: SetCache
) -> tuple[int, int] | None:
    """Return (data version, own fragment-set writes) of the store's connection.

    The version is `SetCache.clean`'s while the wal-index header is the one it was read at.
    ``None`` while a worker holds the connection: the answer then comes from the rows.
    """
    if not main_lock.acquire(blocking=False):
        return None
    try:
        header, clean = sets.header(), sets.clean
        if header is not None and clean is not None and header == clean[0]:
            return clean[1], sets.writes
        version = int(main.execute("PRAGMA data_version").fetchone()[0])
        sets.clean = None if header is None else (header, version)
        return version, sets.writes
    except sqlite3.Error:
        return None
    finally:
        main_lock.release()
