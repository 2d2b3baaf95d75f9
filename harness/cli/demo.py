"""The demo session behind ``make run``: one agent fixing a failing test, every round explained.

Offline (the default) it runs on the `ScriptedModel` with a scripted plan; with a model
name (``HARNESS_MODEL`` or ``--model``) the same workspace, tools and stack run on a real
provider through litellm. Either way every model request prints its manifest: tokens
against the budget, what it was built from, and what the stack changed (offloaded tool
output, material left out for the budget, compaction).

The demo touches no file of yours: by default it works in a temporary folder that it
removes at the end. Given a folder (``--workspace DIR``), it uses it only when the folder
is new, empty, or one it created before (it leaves a ``.harness-demo`` marker there), and
refuses any other folder with a `WorkspaceError` instead of overwriting its files.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from typing import Any

from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.blocks import ContextBlock
from harness.cli.report import format_manifest
from harness.errors import HarnessError, WorkspaceError
from harness.messages import Message
from harness.policy import ContextPolicy
from harness.request import ModelRequest
from harness.sessions.store import SessionKey
from harness.state import StateKey
from harness.tools import ToolContext
from harness.workspace import Workspace

MARKER = ".harness-demo"
"""The file that marks a folder as the demo's own (so a later run may reuse it)."""

BUILD_KEY: StateKey[str] = StateKey("demo/build", str)
"""The build status the demo's ``run_tests`` tool keeps in the session."""
TASK = "The login test fails. Find out why, fix src/login.py, and run the tests until they pass."

_BROKEN = '''"""Login checks."""


def is_session_valid(issued_at: float, now: float, ttl: float = 3600) -> bool:
    """Return whether a session issued at ``issued_at`` is still valid at ``now``."""
    return now - issued_at > ttl
'''
_FIXED = _BROKEN.replace("now - issued_at > ttl", "now - issued_at < ttl")

_FILES = {
    "AGENTS.md": "# Project rules\n- Run the tests after every change.\n- Keep fixes minimal.\n",
    "MEMORY.md": "# Memory\n- The login module was refactored last week (session TTL moved to login.py).\n",
    "knowledge/auth-guide.md": "# Authentication guide\n"
    + "".join(
        f"\n## Section {i}\nSessions expire after their TTL; an expired session returns 401. "
        "Refresh tokens are rotated on every use and revoked on logout. " * 3
        for i in range(1, 25)
    ),
    "src/login.py": _BROKEN,
    "tests/test_login.py": "from src.login import is_session_valid\n\n\ndef test_fresh_session_is_valid():\n"
    "    assert is_session_valid(issued_at=0, now=10)\n",
}


# ----------------------------------------------------------------------------- tools
def list_files(folder: str, context: ToolContext) -> str:
    """List the files in a workspace folder.

    Args:
        folder: the folder, relative to the workspace root ("" for the root).
        context: injected.
    """
    files = workspace_of(context).list(folder, recursive=True)
    return "\n".join(files) or "(empty)"


def write_file(path: str, content: str, context: ToolContext) -> str:
    """Write a text file in the workspace (replacing it).

    Args:
        path: the file's path, relative to the workspace root.
        content: the new content.
        context: injected.
    """
    workspace_of(context).write_text(path, content)
    return f"wrote {len(content)} characters to {path}"


def run_tests(context: ToolContext) -> str:
    """Run the project's test suite and return its output."""
    source = workspace_of(context).read_text("src/login.py")
    passed = "now - issued_at < ttl" in source
    context.state.set(BUILD_KEY, "passing" if passed else "failing: test_login")
    lines = [
        f"tests/test_module_{i:03}.py::test_case_{j} PASSED" for i in range(120) for j in range(12)
    ]
    if passed:
        return (
            "\n".join(lines[:40])
            + f"\n... {len(lines) - 40} more PASSED\n==== {len(lines) + 1} passed in 3.2s ===="
        )
    failure = (
        "\n________________________ test_fresh_session_is_valid ________________________\n"
        "    def test_fresh_session_is_valid():\n>       assert is_session_valid(issued_at=0, now=10)\n"
        "E       assert False\nE        +  where False = is_session_valid(issued_at=0, now=10)\n\n"
        "src/login.py:6: in is_session_valid\n    return now - issued_at > ttl\n"
        f"==== 1 failed, {len(lines)} passed in 3.4s ===="
    )
    return (
        "\n".join(lines)
        + "\n" * 2
        + "\n".join(f"DEBUG cache warmup step {k}" for k in range(800))
        + failure
    )


def workspace_of(context: ToolContext) -> Workspace:
    """Return the agent's workspace; the demo tools cannot run without one."""
    if context.workspace is None:
        raise RuntimeError("the demo tools need the agent's workspace")
    return context.workspace


# ------------------------------------------------------------------------ the script
def _offloaded_path(request: ModelRequest) -> str:
    for message in reversed(request.history):
        found = re.search(r"large_tool_results/[\w./-]+", message.text)
        if found:
            return found.group(0).rstrip(".")
    return "large_tool_results"


def _script() -> list[Any]:
    from providers.scripted import ScriptedModel

    call = ScriptedModel.tool_call
    todo = [
        {"content": "Reproduce the failing login test", "status": "in_progress"},
        {"content": "Fix src/login.py", "status": "pending"},
        {"content": "Run the tests until they pass", "status": "pending"},
    ]
    done = [dict(item, status="completed") for item in todo]
    return [
        call("todo_write", {"todos": todo}, text="I'll plan the work first."),
        call("list_files", {"folder": ""}),
        call("run_tests", {}, text="Reproducing the failure."),
        lambda request: call(
            "read_file",
            {"path": _offloaded_path(request), "offset": 86_000, "limit": 2_000},
            text="The output was offloaded; reading its end.",
        ),
        call("read_file", {"path": "src/login.py"}),
        call(
            "write_file",
            {"path": "src/login.py", "content": _FIXED},
            text="The comparison is inverted.",
        ),
        call("run_tests", {}),
        call("todo_write", {"todos": done}),
        "Fixed: `is_session_valid` compared the session age the wrong way round "
        "(`>` instead of `<`). All tests pass now.",
    ]


# ------------------------------------------------------------------------ the session
def demo_workspace(folder: str | os.PathLike[str]) -> Workspace:
    """Return the workspace for a demo run in ``folder``, seeded with the demo's files.

    Raises:
        WorkspaceError: when ``folder`` is a file, cannot be created, or is a non-empty
            folder the demo did not create (its files would be overwritten).
    """
    workspace = Workspace(folder)
    if workspace.fs.ls(workspace.root) and not workspace.exists(MARKER):
        raise WorkspaceError(
            f"the folder {os.fspath(folder)!r} is not empty and was not created by the demo, "
            "which would overwrite files there (src/login.py, MEMORY.md …); give a new or "
            "empty folder, or leave out --workspace to run in a temporary folder",
            location=os.fspath(folder),
        )
    workspace.write_text(MARKER, "This folder was created by `harness run` (the demo).\n")
    for path, text in _FILES.items():
        workspace.write_text(path, text)  # the demo's own files: a rerun starts afresh
    return workspace


def _build_agent(
    model: str | None,
    api_base: str | None,
    api_key: str | None,
    workspace: Workspace,
    max_input_tokens: int | None,
    observer: Any,
) -> HarnessAgent:
    from middleware import default_stack
    from middleware.budget_fit import BudgetFit
    from middleware.compaction import Compaction
    from middleware.context_sources import context_source
    from middleware.task_state import enable_task_list
    from middleware.workspace_materials import instruction

    async def status_source(request: Any) -> list[ContextBlock]:
        return [ContextBlock.runtime("latest", f"Build: {_status(request)}")]

    def _status(request: Any) -> str:
        key = SessionKey(request.user_id, request.agent_id, request.session_id)
        state = agent.states.get(key)
        return (state.get(BUILD_KEY) if state else None) or "not run yet"

    if model:
        from providers.litellm_client import LiteLLMClient

        client: Any = LiteLLMClient(model, api_base=api_base, api_key=api_key)
        budget = max_input_tokens
    else:
        from providers.scripted import ScriptedModel

        client = ScriptedModel(_script(), window=32_000)
        budget = 3_600 if max_input_tokens is None else max_input_tokens
    stack = default_stack(
        instructions=[
            instruction(
                "test-policy", "After changing code, run the tests; if you cannot, say why."
            )
        ],
        sources=[context_source("build-status", status_source)],
        task=enable_task_list(),
        budget=BudgetFit(),
        compaction=Compaction(trigger_messages=14, keep_messages=6, keep_tokens=0),
    )
    agent = HarnessAgent(
        model=client,
        system_prompt="You are a careful coding assistant working in a small repository.",
        tools=[list_files, write_file, run_tests],
        stack=stack,
        workspace=workspace,
        policy=ContextPolicy(max_input_tokens=budget, observer=observer),
        agent_id="demo-assistant",
        max_rounds=20,
    )
    return agent


async def run_demo(
    *,
    model: str | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    workspace: str | None = None,
    max_input_tokens: int | None = None,
    as_json: bool = False,
) -> int:
    """Run the demo session and print each round's manifest; return the exit status.

    Args:
        model: a litellm model name (``None``: the offline ScriptedModel).
        api_base: the provider's base URL.
        api_key: the provider's key.
        workspace: the folder to work in (``None``: a temporary folder, removed at the end).
        max_input_tokens: the input budget (``None``: the demo's small budget offline).
        as_json: print manifests as JSON lines on stdout and everything else on stderr.

    Raises:
        WorkspaceError: when ``workspace`` is a file or a non-empty folder the demo did not
            create (see `demo_workspace`).
    """
    if workspace is not None:
        return await _run(
            demo_workspace(workspace), model, api_base, api_key, max_input_tokens, as_json
        )
    with tempfile.TemporaryDirectory(prefix="harness-demo-") as folder:
        ws = demo_workspace(folder)
        return await _run(ws, model, api_base, api_key, max_input_tokens, as_json, temporary=True)


async def _run(
    ws: Workspace,
    model: str | None,
    api_base: str | None,
    api_key: str | None,
    max_input_tokens: int | None,
    as_json: bool,
    *,
    temporary: bool = False,
) -> int:
    rounds = 0
    human = sys.stderr if as_json else sys.stdout  # --json: only JSON lines on stdout

    def say(text: str) -> None:
        print(text, file=human)

    def observer(manifest: Any) -> None:
        nonlocal rounds
        if as_json:
            print(manifest.to_json().decode())
        else:
            print(
                format_manifest(manifest, round_no=rounds if manifest.purpose == "agent" else None)
            )
        rounds += manifest.purpose == "agent"

    agent = _build_agent(model, api_base, api_key, ws, max_input_tokens, observer)
    where = (
        f"model {model} via litellm"
        if model
        else "the offline ScriptedModel (set HARNESS_MODEL for a real one)"
    )
    say(
        f"context-harness demo · {where}\nworkspace {ws.root}"
        f"{' (temporary, removed at the end)' if temporary else ''}\n"
        f"stack: {' → '.join(type(m).__name__ for m in agent.stack)}\n"
    )
    say(f"user: {TASK}\n")
    started = time.perf_counter()
    ctx = RuntimeContext(user_id="demo-user", session_id="fix-login-001")
    try:
        async for event in agent.stream_events(Message.user(TASK), ctx):
            if event.kind == "tool_call" and event.tool_call is not None:
                args = event.tool_call.arguments
                say(f"  → {event.tool_call.name}({args[:70]}{'…' if len(args) > 70 else ''})")
            elif event.kind == "tool_result" and event.message is not None:
                say(f"  ← {len(event.message.text):,} characters\n")
            elif event.kind == "final" and event.message is not None:
                say(f"assistant: {event.message.text}\n")
    except HarnessError as exc:
        print(f"\nthe session stopped: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    took = time.perf_counter() - started
    record, state = await agent.history(ctx), agent.state(ctx)
    say(
        f"{rounds} model requests in {took:.2f}s · full history "
        f"{len(record)} messages · working history {len(state.working_history)} messages"
    )
    return 0
