"""A throwaway PostgreSQL server for the tests: initdb in a temp folder, on a free loopback port.

The machine's binaries are used (``pg_config --bindir``, then the Debian paths). PostgreSQL
refuses to run as root, so when the tests run as root the server runs as the ``postgres`` OS
user (``runuser``). Trust authentication on 127.0.0.1 only; fsync off (the tests kill clients,
never the server).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def find_bindir() -> Path | None:
    """Return the folder holding ``initdb`` and ``pg_ctl``, or ``None``."""
    candidates: list[str] = []
    if os.environ.get("HARNESS_PG_BINDIR"):
        candidates.append(os.environ["HARNESS_PG_BINDIR"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    candidates += ["/usr/local/pgsql/bin", "/usr/local/bin", "/usr/bin"]
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresServer:
    """One server process; `url` for its ``postgres`` database, `database(name)` for others."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="harness-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self.root.chmod(0o700)
            self._as = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        """The URL of the ``postgres`` database as the ``postgres`` role."""
        return self.database("postgres")

    def database(self, name: str) -> str:
        """The URL of database ``name``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, check=False, cwd=self.root
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}):\n{done.stdout}{done.stderr}")

    def start(self) -> None:
        """Create the cluster and start the server; return when it accepts connections."""
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
            "--no-instructions",
        )
        options = (
            f"-p {self.port} -h 127.0.0.1 -k {self.root} -F "
            "-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        """Stop the server at once and remove its folder."""
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def sql(self, statement: str, database: str = "postgres") -> None:
        """Run one statement with autocommit (CREATE DATABASE and the like)."""
        import psycopg

        with psycopg.connect(self.database(database), autocommit=True) as conn:
            conn.execute(statement.encode())
