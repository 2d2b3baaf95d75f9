"""``harness fragments …`` end to end through subprocess, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sessions import conftest as shared

backend = shared.backend
pg_server = shared.pg_server
store_url = shared.store_url
"""The session-store fixtures: every test runs on SQLite and on a real PostgreSQL."""

ROOT = Path(__file__).resolve().parent.parent


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", "fragments", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_article_workflow(store_url: str) -> None:
    at = ["--session", "s1", "--store", store_url]
    added = json_lines(
        harness("add", *at, "--title", "关键约束", "--content", "不要修改公共接口", "--json")
    )[0]
    fid = str(added["id"])
    other = json_lines(harness("add", *at, "--content", "token=abc123secret", "--json"))[0]
    assert "abc123secret" not in str(other["content"])
    assert harness("edit", *at, "--fragment", fid, "--content", "可以修改内部接口").returncode == 0
    assert harness("disable", *at, "--fragment", fid).returncode == 0
    listed = json_lines(harness("list", *at, "--json"))
    assert (listed[0]["id"], listed[0]["disabled"]) == (fid, True)
    assert harness("move", *at, "--fragment", fid, "--after", str(other["id"])).returncode == 0
    assert [f["id"] for f in json_lines(harness("list", *at, "--json"))][-1] == fid
    assert harness("revert", *at, "--fragment", fid, "--to-version", "1").returncode == 0
    versions = json_lines(harness("show", *at, "--fragment", fid, "--json"))
    assert [v["version"] for v in versions] == [1, 2, 3, 4, 5]
    assert versions[-1]["content"] == "不要修改公共接口"
    found = json_lines(harness("search", *at, "--keyword", "公共接口", "--json"))
    assert [f["id"] for f in found] == [fid]
    table = harness("list", *at)
    assert table.returncode == 0 and "ID" in table.stdout and fid in table.stdout
    assert harness("rm", *at, "--fragment", fid).returncode == 0
    assert fid not in harness("list", *at).stdout
    project = json_lines(harness("add", *at, "--project", "--content", "shared", "--json"))[0]
    elsewhere = json_lines(harness("list", "--session", "s2", "--store", store_url, "--json"))
    assert [f["id"] for f in elsewhere] == [project["id"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["edit", "--fragment", "nope", "--content", "x"], "no fragment 'nope'"),
        (["add", "--content", "x", "--expect-version", "0"], "StateConflict"),
        (["search"], "give --keyword"),
        (["move", "--fragment", "nope", "--position", "0"], "no fragment"),
        (["edit", "--fragment", "nope"], "nothing to edit"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    store_url: str, args: list[str], message: str
) -> None:
    action, *rest = args
    assert harness("add", "--session", "s1", "--store", store_url, "--content", "x").returncode == 0
    done = harness(action, "--session", "s1", "--store", store_url, *rest)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_missing_store_is_refused(tmp_path: Path) -> None:
    done = harness("list", "--session", "s1", "--store", f"sqlite://{tmp_path / 'none.db'}")
    assert done.returncode == 2 and "no session database" in done.stderr
    assert not (tmp_path / "none.db").exists()
