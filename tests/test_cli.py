"""The command line: ``harness run`` (what ``make run`` calls) and argument handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main

ROOT = Path(__file__).resolve().parent.parent


def harness(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m harness ARGS`` with its temporary folder under ``tmp``."""
    (tmp / "tmp").mkdir(exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp),
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp / "tmp"),
    }
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_make_run_command_leaves_no_temporary_folder_behind(tmp_path: Path) -> None:
    out = harness("run", tmp=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "assistant: Fixed" in out.stdout and out.stdout.count("· agent ·") >= 8
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_folder_with_the_users_files_is_refused_without_a_traceback(tmp_path: Path) -> None:
    mine = tmp_path / "project"
    (mine / "src").mkdir(parents=True)
    (mine / "src" / "login.py").write_text("# my code\n")
    out = harness("run", "--workspace", str(mine), tmp=tmp_path)
    assert out.returncode == 2
    assert out.stderr.startswith("harness: WorkspaceError: ") and "Traceback" not in out.stderr
    assert "not empty" in out.stderr and out.stdout == ""
    assert (mine / "src" / "login.py").read_text() == "# my code\n"
    assert sorted(p.name for p in mine.rglob("*")) == ["login.py", "src"]


def test_a_workspace_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    file = tmp_path / "ws.txt"
    file.write_text("x")
    out = harness("run", "--workspace", str(file), tmp=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "WorkspaceError" in out.stderr and "is a file, not a folder" in out.stderr


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_bad_input_budget_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--max-input-tokens", value])
    assert exit_info.value.code == 2
    assert "--max-input-tokens" in capsys.readouterr().err


def test_make_run_command_runs_the_demo_offline_and_prints_a_manifest_per_round(
    tmp_path: Path,
) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--workspace", str(tmp_path / "ws")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rounds = out.stdout.count("· agent ·")
    assert rounds >= 8
    assert out.stdout.count("validation passed") >= rounds
    for transform in ("tool_result_offload:", "omitted_for_budget:", "history_compaction:"):
        assert transform in out.stdout
    assert "assistant: Fixed" in out.stdout
    assert (tmp_path / "ws" / "large_tool_results").is_dir()


def test_json_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--json", "--workspace", str(tmp_path)]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    manifests = [json.loads(line) for line in lines]  # every stdout line is JSON
    assert len(manifests) >= 8
    assert all({"call_id", "validation", "transforms"} <= set(m) for m in manifests)
    assert "assistant: Fixed" in out.err and "user: " in out.err  # the story goes to stderr


def test_json_through_the_command_line_is_only_json_lines(tmp_path: Path) -> None:
    out = harness("run", "--json", tmp=tmp_path)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["purpose"] for line in out.stdout.splitlines()].count("agent") >= 8
    assert "context-harness demo" in out.stderr and "Traceback" not in out.stderr


def test_unknown_command_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["nope"])
    assert exit_info.value.code == 2
