"""Where a SQLite session store lives: its URL, and the checks on the file it names.

``sqlite:///path/to/sessions.db`` (``?synchronous=full`` the one option) or ``sqlite://`` in
memory. The path after the third slash is absolute (``sqlite:///tmp/s.db`` is ``/tmp/s.db``),
except one that starts with ``./`` or ``../`` (``sqlite:///./s.db``): that is relative to the
working directory when the store is made, as SQLAlchemy users expect (it would otherwise be
``/s.db`` at the filesystem root). The URL is parsed when the store is made, so a wrong one fails at once; the file is
checked (a folder, a folder that cannot be made, an unreadable file) when it is first opened,
with an error saying what to do, before SQLite is asked to open it — through ``stat`` and
``access`` only: the file is never opened outside SQLite (`check_file`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from harness.errors import ConfigurationError, WorkspaceError

SYNCHRONOUS: Final = ("normal", "full")
"""The values of the URL's ``synchronous`` option (``normal`` by default)."""


def parse(url: str) -> tuple[Path | None, str]:
    """Return the database file (``None`` in memory) and the ``synchronous`` setting."""
    if not isinstance(url, str) or not url.lower().startswith("sqlite://"):
        raise ConfigurationError(
            f"a SQLite session store URL is 'sqlite:///path/to/sessions.db' or 'sqlite://' "
            f"(in memory), got {url!r}"
        )
    rest = url[len("sqlite://") :]
    if "#" in rest:
        raise ConfigurationError(
            f"a SQLite session store URL takes no fragment, got {url!r}; "
            "write 'sqlite:///path/to/sessions.db'"
        )
    rest, _, query = rest.partition("?")
    synchronous = "normal"
    for option in query.split("&") if query else ():
        name, _, value = option.partition("=")
        if name.lower() != "synchronous" or value.lower() not in SYNCHRONOUS:
            raise ConfigurationError(
                f"a SQLite session store URL takes one option, synchronous=normal (the "
                f"default) or synchronous=full, got {option!r} in {url!r}; write e.g. "
                "'sqlite:///path/to/sessions.db?synchronous=full'"
            )
        synchronous = value.lower()
    if rest in ("", "/:memory:", ":memory:"):
        return None, synchronous
    if not rest.startswith("/"):
        raise ConfigurationError(
            f"a SQLite session store URL needs an absolute path after 'sqlite://' "
            f"(three slashes: 'sqlite:///path/to/sessions.db'), got {url!r}"
        )
    if rest.startswith(("/./", "/../")):  # sqlite:///./x.db: relative, as in SQLAlchemy
        return Path.cwd() / rest[1:], synchronous
    return Path(rest), synchronous


_EFFECTIVE: Final = os.access in os.supports_effective_ids
"""Check access as ``open`` would (the effective user), where the system can tell."""


def check_file(path: Path) -> None:
    """Make the database's folder; refuse a folder, or a file this process may not read.

    Only ``stat`` and ``access`` calls: the file is never opened here. On POSIX, closing *any*
    descriptor of a file releases *every* ``fcntl`` lock the process holds on it, those of
    its live SQLite connections included (SQLite's "How To Corrupt An SQLite Database File",
    2.2). A store opening the file beside another store of the process, with a plain
    ``open`` and ``close``, released the other store's shared lock: the next program to
    close the database then took it for the last user, checkpointed and deleted the WAL,
    and the other store's later commits went to the deleted WAL and were lost.
    """
    if path.is_dir():
        raise WorkspaceError(
            f"the session database path {path} is a folder; give the path of a file inside it, "
            f"e.g. sqlite://{path / 'sessions.db'}",
            path=str(path),
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WorkspaceError(
            f"cannot create the folder for the session database {path}: {error.strerror or error}",
            path=str(path),
        ) from error
    if path.exists() and not os.access(path, os.R_OK, effective_ids=_EFFECTIVE):
        raise WorkspaceError(
            f"cannot read the session database {path}: permission denied. Check its permissions.",
            path=str(path),
        )
