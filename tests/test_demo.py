"""The demo session touches no file of the user's and leaves nothing behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from harness import HarnessAgent, Workspace
from harness.cli.demo import MARKER, run_demo
from harness.errors import WorkspaceError
from providers import ScriptedModel


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


async def test_without_a_folder_it_uses_a_temporary_one_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert await run_demo() == 0
    out = capsys.readouterr().out
    assert "(temporary, removed at the end)" in out and "assistant: Fixed" in out
    assert os.listdir(tmp_path) == []


async def test_a_non_empty_folder_it_did_not_create_is_refused_untouched(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "login.py").write_text("# my own login code\n")
    (tmp_path / "notes.md").write_text("mine\n")
    before = snapshot(tmp_path)
    with pytest.raises(WorkspaceError) as refused:
        await run_demo(workspace=str(tmp_path))
    message = str(refused.value)
    assert "not empty" in message and "leave out --workspace" in message
    assert snapshot(tmp_path) == before


async def test_a_new_or_empty_folder_is_used_kept_and_reusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert await run_demo(workspace=str(empty)) == 0
    new = tmp_path / "new" / "ws"
    assert await run_demo(workspace=str(new)) == 0
    for folder in (empty, new):
        assert (folder / MARKER).is_file() and (folder / "src" / "login.py").is_file()
        assert (folder / "large_tool_results").is_dir()
    # A folder the demo created is its own: a second run starts afresh there.
    assert await run_demo(workspace=str(new)) == 0
    assert "assistant: Fixed" in capsys.readouterr().out


async def test_a_workspace_path_that_is_a_file_is_a_workspace_error(tmp_path: Path) -> None:
    file = tmp_path / "file.txt"
    file.write_text("not a folder")
    with pytest.raises(WorkspaceError, match="is a file, not a folder"):
        await run_demo(workspace=str(file))
    with pytest.raises(WorkspaceError, match="is a file, not a folder"):
        HarnessAgent(model=ScriptedModel(["ok"]), stack=[], workspace=str(file))
    with pytest.raises(WorkspaceError, match="cannot create the workspace folder"):
        Workspace(file / "below")
    assert file.read_text() == "not a folder"


@pytest.mark.parametrize("budget", [3_000, 3_200, 3_400, 3_600, 4_000, 6_000])
async def test_the_demo_session_completes_at_every_small_budget(
    budget: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """A compaction whose kept part left no room for the summary once failed at 3,400."""
    assert await run_demo(max_input_tokens=budget, as_json=True) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines and all('"validation":"passed"' in line for line in lines)
