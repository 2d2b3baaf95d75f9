"""ToolResultOffload when the workspace cannot be written: real failures, not mocks.

Three real faults: the offload folder's place taken by a regular file (fails for root too,
so it runs everywhere), a read-only filesystem and a full one (small tmpfs mounts, where
the machine allows mounting; tests run as root in CI). In each, the oversized result is
replaced by an inline head-and-tail preview, the manifest records
``offload_failed:<call id>:<reason>``, the session goes on, and no temporary file is left.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness import (
    HarnessAgent,
    Message,
    ModelRequest,
    ModelResponse,
    RequestIds,
    RuntimeContext,
    ToolCall,
    Workspace,
)
from harness.errors import WorkspaceError
from middleware.tool_result_offload import ToolResultOffload
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")


def report(size: int, seed: str = "r") -> str:
    """Return a long tool output.

    Args:
        size: characters.
        seed: a prefix making outputs distinct.
    """
    return "".join(f"{seed} line {i:06d} ✓\n" for i in range(size // 10 + 1))[:size]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@contextmanager
def tmpfs(path: Path, *, size: str) -> Iterator[None]:
    """Mount a small tmpfs at ``path`` for the test, or skip when the machine allows none."""
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8); this machine allows neither")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


def agent_for(workspace: Workspace, *replies: object) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(list(replies))  # type: ignore[arg-type]
    # The sessions live elsewhere: the fault under test is the offload folder's.
    agent = HarnessAgent(
        model=model,
        tools=[report],
        stack=[ToolResultOffload()],
        workspace=workspace,
        store="sqlite://",
    )
    return agent, model


def check_inline_fallback(request: ModelRequest, original: str, reason: str) -> None:
    """The request shows head and tail inline, says the middle is unavailable, records why."""
    (transform,) = [t for t in request.transforms if t.startswith("offload_failed:")]
    assert transform == f"offload_failed:c1:{reason}"
    (preview,) = [m for m in request.history if m.meta("offload_failed") is not None]
    assert preview.meta("offload_failed") == reason
    assert original[:2_000] in preview.text and original[-2_000:] in preview.text
    assert original[2_000:2_200] not in preview.text
    assert "could not be saved" in preview.text and "read_file(" not in preview.text
    assert len(preview.text) < 4_600
    assert not any(t.startswith("tool_result_offload:") for t in request.transforms)


async def test_a_file_where_the_folder_should_be_falls_back_inline(tmp_path: Path) -> None:
    """Root cannot create a folder under a regular file either: this fault runs everywhere."""
    ws = Workspace(tmp_path)
    (tmp_path / "large_tool_results").write_text("the user's own file\n")
    original = report(100_000)
    agent, model = agent_for(
        ws,
        ScriptedModel.tool_call("report", {"size": 100_000}, id="c1"),
        "first done",
        ScriptedModel.tool_call("report", {"size": 90_000, "seed": "again"}, id="c2"),
        "second done",
    )
    assert (await agent.call("go", CTX)).text == "first done"
    check_inline_fallback(model.agent_requests[1], original, "ENOTDIR")
    # The session goes on: the next call works, its own result falls back the same way.
    assert (await agent.call("more", CTX)).text == "second done"
    assert "offload_failed:c2:ENOTDIR" in model.agent_requests[-1].transforms
    # The committed preview is not offloaded again, the full record keeps the original.
    assert model.agent_requests[-1].transforms.count("offload_failed:c1:ENOTDIR") == 0
    assert any(m.text == original for m in await agent.history(CTX))
    assert (tmp_path / "large_tool_results").read_text() == "the user's own file\n"
    assert files_under(tmp_path) == ["large_tool_results"]  # nothing else, no temp file


async def test_a_read_only_filesystem_falls_back_inline_and_recovers(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    with tmpfs(folder, size="1m"):
        ws = Workspace(folder)
        remount(folder, "ro")
        with pytest.raises(OSError) as probe:
            (folder / "probe").write_text("x")
        assert probe.value.errno == errno.EROFS  # a real read-only filesystem, even for root
        original = report(120_000)
        agent, model = agent_for(
            ws,
            ScriptedModel.tool_call("report", {"size": 120_000}, id="c1"),
            "done",
            ScriptedModel.tool_call("report", {"size": 95_000, "seed": "later"}, id="c2"),
            "done again",
        )
        assert (await agent.call("go", CTX)).text == "done"
        check_inline_fallback(model.agent_requests[1], original, "EROFS")
        assert files_under(folder) == []
        # Writable again: the next result is offloaded to a file as usual.
        remount(folder, "rw")
        assert (await agent.call("more", CTX)).text == "done again"
        assert "tool_result_offload:c2" in model.agent_requests[-1].transforms
        (path,) = ws.list("large_tool_results", recursive=True)
        assert ws.read_text(path) == report(95_000, "later")


async def test_a_full_filesystem_falls_back_inline_and_leaves_no_temp_file(tmp_path: Path) -> None:
    folder = tmp_path / "full"
    with tmpfs(folder, size="64k"):
        ws = Workspace(folder)
        original = report(200_000)  # ~206 KB of UTF-8: cannot fit in 64 KB
        agent, model = agent_for(
            ws, ScriptedModel.tool_call("report", {"size": 200_000}, id="c1"), "done", "still fine"
        )
        assert (await agent.call("go", CTX)).text == "done"
        check_inline_fallback(model.agent_requests[1], original, "ENOSPC")
        # The partial temporary file was removed: only the (empty) folders remain.
        assert files_under(folder) == []
        assert (await agent.call("next", CTX)).text == "still fine"


def test_workspace_writes_on_a_full_filesystem_raise_and_clean_up(tmp_path: Path) -> None:
    folder = tmp_path / "full"
    with tmpfs(folder, size="64k"):
        ws = Workspace(folder)
        ws.write_text("kept.txt", "the old content")
        with pytest.raises(WorkspaceError) as failure:
            ws.write_bytes("kept.txt", b"x" * 200_000)
        assert isinstance(failure.value.__cause__, OSError)
        assert failure.value.__cause__.errno == errno.ENOSPC
        assert "free space" in str(failure.value)
        # The old file is intact (atomic replace) and no temporary file is left.
        assert ws.read_text("kept.txt") == "the old content"
        assert files_under(folder) == ["kept.txt"]


async def test_no_workspace_at_all_falls_back_inline() -> None:
    """Outside an agent, with no workspace anywhere, the preview is inline too."""
    original = report(100_000)
    history = (
        Message.user("go"),
        Message.assistant(None, tool_calls=[ToolCall(id="c1", name="report")]),
        Message.tool("c1", original, name="report"),
    )
    seen: list[ModelRequest] = []

    async def model(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    request = ModelRequest(model="m", ids=RequestIds(user_id="u", session_id="s"), history=history)
    await ToolResultOffload()(request, model)
    check_inline_fallback(seen[0], original, "no_workspace")
