"""The command line: ``harness run`` (what ``make run`` calls) and argument handling."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent


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
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines and all('"call_id"' in line and '"validation"' in line for line in lines)


def test_unknown_command_exits_with_usage() -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["nope"])
    assert exit_info.value.code == 2
