"""No secret shape reaches a session store in clear: SQLite file bytes and PostgreSQL rows.

An agent session (the ScriptedModel) writes every shape of `tests._secret_shapes` through the
real write path — the first user message (and so the session's title), a tool call's
arguments, the tool's result and the model's reply — into a SQLite file and a real PostgreSQL
database; then every byte of the SQLite files and every row of every PostgreSQL table is
searched for each secret.
"""

from __future__ import annotations

from pathlib import Path

from harness import HarnessAgent, RuntimeContext
from harness.sessions import open_store
from middleware import PairValidation
from providers import ScriptedModel

from .._secret_shapes import CASES

CTX = RuntimeContext(user_id="u1", session_id="s1")
TEXTS = [text for text, _ in CASES]
SECRETS = sorted({secret for _, secret in CASES})


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return "\n\n".join(TEXTS[2::4])


def _sqlite_bytes(folder: Path) -> bytes:
    """Every byte of the SQLite store's files (the database, its WAL and shared memory)."""
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("sessions.db"))


def _postgres_rows(url: str) -> str:
    """Every row of every table of the store's database, as text."""
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        ]
        return "\n".join(
            str(row[0])
            for table in tables
            for row in conn.execute(f"SELECT t::text FROM {table} t")
        )


async def test_no_secret_shape_is_stored_in_clear(
    store_url: str, backend: str, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [
            ScriptedModel.tool_call(
                "shell",
                {"command": "\n".join(TEXTS[1::4])},
                text="checking the config",
            ),
            "\n\n".join(TEXTS[3::4]),
        ],
        default="ok",
    )
    store = open_store(store_url)
    try:
        agent = HarnessAgent(model=model, tools=[shell], stack=[PairValidation()], store=store)
        await agent.call("\n\n".join(TEXTS[0::4]), CTX)
        # The model read the tool's real output (RAM keeps the clear text).
        assert any(TEXTS[2] in m.text for m in model.agent_requests[-1].history)
        sessions = await store.sessions("u1")
        assert sessions and "[REDACTED:" in sessions[0].title
    finally:
        await store.aclose()

    stored = (
        _sqlite_bytes(tmp_path).decode("utf-8", "replace")
        if backend == "sqlite"
        else _postgres_rows(store_url)
    )
    assert stored.count("[REDACTED:") >= len(CASES)  # the messages were stored, redacted
    assert [s for s in SECRETS if s in stored] == []
