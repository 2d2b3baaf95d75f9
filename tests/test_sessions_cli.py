"""``harness sessions …`` and ``harness manifests …`` end to end, through ``subprocess``.

Stores are real SQLite files (and one real PostgreSQL database), filled through
`SessionStore.commit` with the events the agent records.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import anyio
import pytest

from harness.manifest import ContextManifest, Transform
from harness.messages import Message, ToolCall
from harness.sessions import (
    Event,
    ManifestEvent,
    MessageEvent,
    RewriteEvent,
    SessionKey,
    StoredState,
    ToolRunEvent,
    open_store,
)
from middleware.tool_result_offload import TOOL_RESULT_OFFLOAD
from middleware.tool_result_offload._read_file import session_key

from .sessions.conftest import new_database, pg_server
from .sessions.pg_server import PostgresServer

__all__ = ["pg_server"]  # the PostgreSQL fixture of the session suite, shared

ROOT = Path(__file__).resolve().parent.parent
ALICE = SessionKey("alice", "agent", "s1")
BOB = SessionKey("bob", "agent", "s1")  # Bob uses the same session id
ALICE_SECRET = "修复登录测试: the login comparison is inverted"
BOB_SECRET = "bob's vault code is 4711"


def manifest(call_id: str) -> ContextManifest:
    return ContextManifest(
        call_id=call_id,
        purpose="agent",
        model="scripted",
        estimated_input_tokens=1_234,
        input_limit=3_600,
        counting_method="approximate:o200k",
        exact=False,
        transforms=(Transform(TOOL_RESULT_OFFLOAD, "call-1"),),
    )


def fill(url: str) -> None:
    """Record Alice's session (two rounds) and Bob's (same session id) in the store at ``url``."""

    async def main() -> None:
        store = open_store(url)
        try:
            user = Message.user(ALICE_SECRET)
            call = Message.assistant(
                "Running.", tool_calls=(ToolCall(id="call-1", name="run_tests"),)
            )
            result = Message.tool("call-1", "x" * 5_000, name="run_tests")
            first: list[Event] = [
                MessageEvent(message=user),
                ManifestEvent(manifest=manifest("build-1")),
                MessageEvent(message=call),
                ToolRunEvent(name="run_tests", call_id="call-1", duration_s=0.5),
                MessageEvent(message=result),
            ]
            version = await store.commit(
                ALICE, expected_version=0, events=first, state=StoredState(title="fix login")
            )
            second: list[Event] = [
                ManifestEvent(manifest=manifest("build-2")),
                RewriteEvent(
                    message=result.revise("offload", content="preview"),
                    original_id=result.id,
                    how="offload",
                ),
                MessageEvent(message=Message.assistant("Fixed.")),
            ]
            await store.commit(
                ALICE, expected_version=version, events=second, state=StoredState(title="fix login")
            )
            await store.commit(
                BOB,
                expected_version=0,
                events=[MessageEvent(message=Message.user(BOB_SECRET))],
                state=StoredState(title="vault"),
            )
        finally:
            await store.aclose()

    anyio.run(main)


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m harness ARGS`` in ``cwd``."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def json_lines(out: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    """Parse every stdout line as JSON (a line that is not fails the test)."""
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    parsed = [json.loads(line) for line in lines]
    assert all(isinstance(p, dict) for p in parsed)
    return parsed


def failed(out: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """Check a clear one-line failure and return the line."""
    assert out.returncode == status, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: "), out.stderr
    return lines[0]


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite://{tmp_path / 'db' / 'sessions.db'}"
    fill(url)
    return url


# ------------------------------------------------------------------ reading
def test_list_show_search_and_manifests_as_tables(tmp_path: Path, store_url: str) -> None:
    listed = harness("sessions", "list", "--store", store_url, "--user", "alice", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["SESSION", "AGENT", "MESSAGES", "EVENTS", "LAST", "ACTIVE", "TITLE"]
    assert row.split()[:4] == ["s1", "agent", "4", "8"] and row.endswith("fix login")

    shown = harness(
        "sessions", "show", "--store", store_url, "--user", "alice", "--session", "s1", cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    kinds = [line.split()[3] for line in shown.stdout.splitlines()[2:]]
    assert kinds == [
        "message",
        "manifest",
        "message",
        "tool_run",
        "message",
        "manifest",
        "rewrite",
        "message",
    ]
    assert ALICE_SECRET in shown.stdout and "offload of " in shown.stdout

    found = harness(
        "sessions", "search", "登录测试", "--store", store_url, "--user", "alice", cwd=tmp_path
    )
    assert found.returncode == 0 and "s1" in found.stdout and "修复登录测试" in found.stdout

    built = harness(
        "manifests",
        "show",
        "--store",
        store_url,
        "--user",
        "alice",
        "--session",
        "s1",
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout.count("┌ request · call build-") == 2
    assert "1,234 / 3,600 tokens" in built.stdout


def test_json_output_is_only_json_lines_for_every_subcommand(
    tmp_path: Path, store_url: str
) -> None:
    common = ("--store", store_url, "--user", "alice", "--json")
    listed = json_lines(harness("sessions", "list", *common, cwd=tmp_path))
    assert [(s["session_id"], s["messages"], s["events"]) for s in listed] == [("s1", 4, 8)]

    events = json_lines(harness("sessions", "show", "--session", "s1", *common, cwd=tmp_path))
    assert [e["seq"] for e in events] == list(range(1, 9))
    assert [e["event"]["type"] for e in events][:2] == ["message", "manifest"]  # type: ignore[index]
    page = json_lines(
        harness(
            "sessions",
            "show",
            "--session",
            "s1",
            "--kind",
            "message",
            "--offset",
            "1",
            "--limit",
            "2",
            *common,
            cwd=tmp_path,
        )
    )
    assert [e["seq"] for e in page] == [3, 5]

    hits = json_lines(harness("sessions", "search", "login inverted", *common, cwd=tmp_path))
    assert [(h["session_id"], h["seq"], h["role"]) for h in hits] == [("s1", 1, "user")]
    assert (
        json_lines(harness("sessions", "search", "nothing-like-this", *common, cwd=tmp_path)) == []
    )

    built = json_lines(harness("manifests", "show", "--session", "s1", *common, cwd=tmp_path))
    assert [m["call_id"] for m in built] == ["build-1", "build-2"]
    one = json_lines(
        harness("manifests", "show", "--session", "s1", "--call", "build-2", *common, cwd=tmp_path)
    )
    assert len(one) == 1 and one[0]["transforms"] == ["tool_result_offload:call-1"]

    empty = json_lines(
        harness("sessions", "list", "--store", store_url, "--user", "carol", "--json", cwd=tmp_path)
    )
    assert empty == []


def test_the_default_store_is_the_workspaces(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    fill(f"sqlite://{workspace / '.harness' / 'sessions.db'}")
    by_flag = json_lines(
        harness(
            "sessions",
            "list",
            "--workspace",
            str(workspace),
            "--user",
            "alice",
            "--json",
            cwd=tmp_path,
        )
    )
    in_folder = json_lines(harness("sessions", "list", "--user", "alice", "--json", cwd=workspace))
    assert [s["session_id"] for s in by_flag] == [s["session_id"] for s in in_folder] == ["s1"]


# ------------------------------------------------------------------ isolation
def test_another_users_session_reads_like_a_missing_one(tmp_path: Path, store_url: str) -> None:
    common = ("--store", store_url, "--user", "bob")
    listed = json_lines(harness("sessions", "list", *common, "--json", cwd=tmp_path))
    assert [s["title"] for s in listed] == ["vault"]
    # Bob's s1 is his own: none of Alice's s1 shows.
    mine = harness("sessions", "show", *common, "--session", "s1", cwd=tmp_path)
    assert BOB_SECRET in mine.stdout and ALICE_SECRET not in mine.stdout
    # Alice's text is not found for Bob, in any form.
    for query in ("修复登录测试", "inverted", "login"):
        assert (
            json_lines(harness("sessions", "search", query, *common, "--json", cwd=tmp_path)) == []
        )
    # A session only Alice has (under another agent id) and one nobody has fail alike.
    theirs = failed(
        harness("sessions", "show", *common, "--agent", "other", "--session", "s1", cwd=tmp_path)
    )
    carol = failed(
        harness(
            "sessions",
            "show",
            "--store",
            store_url,
            "--user",
            "carol",
            "--agent",
            "other",
            "--session",
            "s1",
            cwd=tmp_path,
        )
    )
    assert theirs.replace("'bob'", "'carol'") == carol
    alice_as_bob = failed(
        harness("manifests", "show", *common, "--session", "s1", "--call", "build-1", cwd=tmp_path)
    )
    assert "no manifest of call 'build-1'" in alice_as_bob
    assert failed(
        harness("sessions", "purge", *common, "--agent", "other", "--session", "s1", cwd=tmp_path)
    )
    still = json_lines(
        harness("sessions", "list", "--store", store_url, "--user", "alice", "--json", cwd=tmp_path)
    )
    assert [s["session_id"] for s in still] == ["s1"]


# ------------------------------------------------------------------ purge and retention
def offload_folder(workspace: Path, key: SessionKey) -> Path:
    folder = workspace / "large_tool_results" / session_key(key.session_id, key.user_id)
    folder.mkdir(parents=True)
    (folder / "result.txt").write_text("offloaded bytes")
    return folder


def test_purge_one_session_removes_its_offloaded_files_only(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    fill(f"sqlite://{workspace / '.harness' / 'sessions.db'}")
    alices, bobs = offload_folder(workspace, ALICE), offload_folder(workspace, BOB)
    out = harness(
        "sessions", "purge", "--user", "alice", "--session", "s1", "--json", cwd=workspace
    )
    assert json_lines(out) == [
        {"user_id": "alice", "agent_id": "agent", "session_id": "s1", "offloads_removed": True}
    ]
    assert not alices.exists() and (bobs / "result.txt").read_text() == "offloaded bytes"
    again = failed(
        harness("sessions", "purge", "--user", "alice", "--session", "s1", cwd=workspace)
    )
    assert "no session 's1'" in again and "nothing purged" in again
    assert json_lines(harness("sessions", "list", "--user", "alice", "--json", cwd=workspace)) == []
    assert (
        len(json_lines(harness("sessions", "list", "--user", "bob", "--json", cwd=workspace))) == 1
    )


def test_retention_purges_idle_sessions_of_the_user_or_of_everyone(tmp_path: Path) -> None:
    workspace = tmp_path / "project"
    fill(f"sqlite://{workspace / '.harness' / 'sessions.db'}")
    alices, bobs = offload_folder(workspace, ALICE), offload_folder(workspace, BOB)
    ws = ("--workspace", str(workspace))
    none = harness(
        "sessions", "purge", *ws, "--user", "alice", "--older-than", "1", "--json", cwd=tmp_path
    )
    assert json_lines(none) == [] and alices.exists()
    table = harness("sessions", "purge", *ws, "--user", "alice", "--older-than", "0", cwd=tmp_path)
    assert table.returncode == 0 and "purged session 's1'" in table.stdout
    assert not alices.exists() and bobs.exists()
    everyone = json_lines(
        harness(
            "sessions", "purge", *ws, "--older-than", "0", "--all-users", "--json", cwd=tmp_path
        )
    )
    assert [(k["user_id"], k["offloads_removed"]) for k in everyone] == [("bob", True)]
    assert not bobs.exists()


def test_purge_through_a_store_elsewhere_leaves_files_and_says_so(
    tmp_path: Path, store_url: str
) -> None:
    files = offload_folder(tmp_path, ALICE)
    out = harness(
        "sessions",
        "purge",
        "--store",
        store_url,
        "--user",
        "alice",
        "--session",
        "s1",
        "--json",
        cwd=tmp_path,
    )
    assert json_lines(out)[0]["offloads_removed"] is False
    assert "not removed" in out.stderr and files.exists()


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("args", "says", "status"),
    [
        (("sessions", "list", "--store", "bogus"), "session store URL looks like", 2),
        (("sessions", "list", "--store", "mysql://db/x"), "unknown session store scheme", 2),
        (("sessions", "list", "--store", "sqlite://relative.db"), "absolute path", 2),
        (
            ("sessions", "list", "--store", "sqlite:///nowhere/at/all.db"),
            "no session database at",
            2,
        ),
        (("sessions", "list", "--workspace", "empty"), "no session database at", 2),
        (
            ("sessions", "list", "--store", "postgresql://nobody@127.0.0.1:1/db"),
            "cannot connect",
            2,
        ),
        (("sessions", "show", "--session", "nope", "--user", "alice"), "no session 'nope'", 1),
        (
            ("sessions", "show", "--session", "", "--user", "alice"),
            "--session must not be empty",
            2,
        ),
        (("sessions", "show", "--session", "a\x01b"), "control characters", 2),
        (("sessions", "show", "--session", "x" * 600), "longer than 512", 2),
        (("sessions", "search", "  "), "the search query is empty", 2),
        (
            ("manifests", "show", "--session", "s1", "--user", "alice", "--call", "zz"),
            "no manifest of call 'zz'",
            1,
        ),
        (("sessions", "purge", "--older-than", "1", "--all-users", "--session", "s1"), "", 2),
        (
            ("sessions", "purge", "--session", "s1", "--all-users"),
            "--all-users goes with --older-than",
            2,
        ),
    ],
)
def test_bad_input_is_one_clear_line_and_a_non_zero_exit(
    tmp_path: Path, store_url: str, args: tuple[str, ...], says: str, status: int
) -> None:
    (tmp_path / "empty").mkdir()
    uses_store = "--store" in args or "--workspace" in args
    full = args if uses_store else (*args, "--store", store_url)
    out = harness(*full, cwd=tmp_path)
    if says:
        assert says in failed(out, status)
    else:  # argparse's own usage error
        assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("sessions",),
        ("sessions", "frob"),
        ("manifests", "list"),
        ("frob",),
        ("sessions", "show"),
        ("sessions", "purge"),
        ("sessions", "show", "--session", "s1", "--limit", "many"),
        ("sessions", "show", "--session", "s1", "--kind", "gossip"),
        ("sessions", "purge", "--older-than", "-3"),
        ("sessions", "purge", "--older-than", "nan"),
    ],
)
def test_unknown_subcommands_and_bad_flags_are_usage_errors(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    out = harness(*args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert (
        "usage: harness" in out.stderr and "error:" in out.stderr and "Traceback" not in out.stderr
    )


def test_a_file_that_is_not_a_session_database_is_a_clear_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    line = failed(harness("sessions", "list", "--store", f"sqlite://{junk}", cwd=tmp_path), 2)
    assert "WorkspaceError" in line and "not a usable session database" in line


# ------------------------------------------------------------------ PostgreSQL
def test_the_cli_on_a_postgresql_store(tmp_path: Path, pg_server: PostgresServer) -> None:
    url = new_database(pg_server)
    fill(url)
    common = ("--store", url, "--json")
    listed = json_lines(harness("sessions", "list", *common, "--user", "alice", cwd=tmp_path))
    assert [(s["session_id"], s["messages"], s["events"]) for s in listed] == [("s1", 4, 8)]
    hits = json_lines(
        harness("sessions", "search", "登录测试", *common, "--user", "alice", cwd=tmp_path)
    )
    assert [h["seq"] for h in hits] == [1]
    assert (
        json_lines(harness("sessions", "search", "vault", *common, "--user", "alice", cwd=tmp_path))
        == []
    )
    built = json_lines(
        harness("manifests", "show", "--session", "s1", *common, "--user", "alice", cwd=tmp_path)
    )
    assert [m["call_id"] for m in built] == ["build-1", "build-2"]
    failed(
        harness(
            "sessions", "show", "--session", "s1", "--store", url, "--user", "carol", cwd=tmp_path
        )
    )
    purged = json_lines(
        harness("sessions", "purge", "--older-than", "0", *common, "--user", "alice", cwd=tmp_path)
    )
    assert [(k["user_id"], k["session_id"]) for k in purged] == [("alice", "s1")]
    assert len(json_lines(harness("sessions", "list", *common, "--user", "bob", cwd=tmp_path))) == 1


# ------------------------------------------------------------------ the installed package
@pytest.mark.parametrize(
    "args",
    [
        (),
        ("run",),
        ("sessions",),
        ("sessions", "list"),
        ("sessions", "show"),
        ("sessions", "search"),
        ("sessions", "purge"),
        ("manifests",),
        ("manifests", "show"),
    ],
)
def test_every_subcommand_has_help(tmp_path: Path, args: tuple[str, ...]) -> None:
    out = harness(*args, "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: harness{''.join(' ' + a for a in args)}")


def test_the_cli_does_not_import_benchmarks(tmp_path: Path) -> None:
    code = (
        "import sys; from harness.cli.main import main, _parser; _parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'benchmarks'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_the_built_wheel_runs_every_subcommand_help(tmp_path: Path) -> None:
    uv = ROOT / ".tools" / "bin" / "uv"
    if not uv.exists():
        pytest.skip("uv is not in .tools/bin (make setup installs it)")
    build = subprocess.run(
        [str(uv), "build", "--wheel", "--offline", "-o", str(tmp_path / "dist")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if build.returncode != 0:
        pytest.skip(f"the wheel cannot be built offline here: {build.stderr[-300:]}")
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        assert not [n for n in archive.namelist() if n.startswith("benchmarks/")]
        archive.extractall(site)
    # The installed package only: the source checkout is taken off the path.
    code = (
        "import sys; "
        f"sys.path[:] = [{str(site)!r}] + [p for p in sys.path if p not in ('', {str(ROOT)!r})]; "
        "import harness; assert harness.__file__.startswith(sys.path[0]), harness.__file__; "
        "from harness.cli import main; raise SystemExit(main(sys.argv[1:]))"
    )
    for args in [
        ("sessions", "list"),
        ("sessions", "show"),
        ("sessions", "search"),
        ("sessions", "purge"),
        ("manifests", "show"),
        ("run",),
    ]:
        out = subprocess.run(
            [sys.executable, "-c", code, *args, "--help"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0 and out.stdout.startswith("usage: harness"), out.stderr
