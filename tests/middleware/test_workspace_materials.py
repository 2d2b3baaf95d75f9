"""WorkspaceMaterials through the real agent loop, on a temp folder and on ``memory://``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from harness import (
    ContextBlock,
    ContextManifest,
    ContextPolicy,
    HarnessAgent,
    ModelRequest,
    ModelResponse,
    RequestIds,
    RuntimeContext,
    ToolContext,
    Workspace,
)
from harness.accounting import estimate_request
from harness.errors import ConfigurationError
from harness.messages import Message, new_id
from harness.tokens import shared_exact
from harness.types import Handler
from middleware.budget_fit import BudgetFit
from middleware.context_sources import ContextRequest, ContextSources, context_source
from middleware.memory import memory_path
from middleware.workspace_materials import WorkspaceMaterials, instruction
from providers import ScriptedModel


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def agent_on(
    workspace: Workspace | str | Path | None,
    materials: WorkspaceMaterials,
    *,
    replies: Sequence[object] = ("ok",),
    tools: Sequence[object] = (),
    extra: Sequence[object] = (),
    limit: int | None = None,
    manifests: list[ContextManifest] | None = None,
) -> tuple[HarnessAgent, ScriptedModel]:
    model = ScriptedModel(list(replies))  # type: ignore[arg-type]
    agent = HarnessAgent(
        model=model,
        system_prompt="You are the project assistant.",
        tools=list(tools),  # type: ignore[arg-type]
        workspace=str(workspace) if isinstance(workspace, Path) else workspace,
        stack=[materials, *extra],  # type: ignore[list-item]
        store="sqlite://",  # each agent of a test starts its own session
        policy=ContextPolicy(
            max_input_tokens=limit, observer=manifests.append if manifests is not None else None
        ),
    )
    return agent, model


def by_source(request: ModelRequest) -> dict[str, ContextBlock]:
    return {b.source_id: b for b in request.blocks}


async def test_instructions_become_system_parts_in_a_stable_order(tmp_path: Path) -> None:
    write(tmp_path, {"AGENTS.md": "Follow the coding conventions."})
    materials = WorkspaceMaterials(
        instructions=[
            instruction("test-policy", "Run the related tests after a change."),
            instruction("style", "Keep functions short."),
        ]
    )
    agent, model = agent_on(tmp_path, materials)
    await agent.call("fix it")
    (request,) = model.agent_requests
    assert [p.name for p in request.system] == [
        "prompt",
        "AGENTS.md",
        "instruction/test-policy",
        "instruction/style",
    ]
    assert request.render()[0].text == (
        "You are the project assistant.\n\nFollow the coding conventions.\n\n"
        "Run the related tests after a change.\n\nKeep functions short."
    )


async def test_memory_knowledge_and_context_files_are_reference_blocks(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "MEMORY.md": "The user prefers small commits.",
            "knowledge/b.md": "Login returns 401 on expiry.",
            "knowledge/a/deep.md": "Sessions last 30 minutes.",
            "docs/extra.md": "Release notes.",
        },
    )
    agent, model = agent_on(tmp_path, WorkspaceMaterials(context_files=["docs/extra.md"]))
    await agent.call("x")
    (request,) = model.agent_requests
    assert [(b.source_id, b.category) for b in request.blocks] == [
        ("workspace/MEMORY.md", "memory"),
        ("workspace/docs/extra.md", "context"),
        ("workspace/knowledge/a/deep.md", "knowledge"),
        ("workspace/knowledge/b.md", "knowledge"),
    ]
    assert all(b.kind == "reference" and b.where == "HARNESS_CONTEXT" for b in request.blocks)
    assert all(not b.required and b.priority < 0 for b in request.blocks)
    system = request.render()[0].text
    assert "small commits" not in system and "401" not in system
    rendered = request.render()
    # Stable workspace material comes right after System, before the history (prompt cache).
    assert [m.id for m in rendered] == [
        "render/system",
        "render/reference",
        *(m.id for m in request.history),
    ]
    assert "[workspace/MEMORY.md]\nThe user prefers small commits." in rendered[1].text
    assert all(b.stable for b in request.blocks)


def test_the_stable_field_not_the_category_places_a_block_before_the_history() -> None:
    marked = ContextBlock.reference("notes", "Rarely changes.", category="docs", stable=True)
    named = ContextBlock.reference("mem", "A source's block.", category="memory")
    state = ContextBlock.runtime("now", "Changes every round.", stable=True)  # not reference
    request = ModelRequest(model="m", history=(Message.user("q"),), blocks=(marked, named, state))
    rendered = request.render()
    assert [m.id for m in rendered] == ["render/reference", request.history[0].id, "render/blocks"]
    assert "[notes]" in rendered[0].text
    assert "[mem]" in rendered[2].text and "[now]" in rendered[2].text


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_files_are_loaded_once_per_call_and_reread_on_the_next_call(
    tmp_path: Path, anyio_backend: str
) -> None:
    write(tmp_path, {"AGENTS.md": "rules v1", "MEMORY.md": "memory v1"})

    def edit(context: ToolContext) -> str:
        """Edit the workspace files."""
        assert context.workspace is not None
        context.workspace.write_text("AGENTS.md", "rules v2")
        context.workspace.write_text("MEMORY.md", "memory v2")
        return "edited"

    agent, model = agent_on(
        tmp_path,
        WorkspaceMaterials(),
        replies=[ScriptedModel.tool_call("edit"), "done", "again"],
        tools=[edit],
    )
    await agent.call("first")
    first, second = model.agent_requests
    for request in (first, second):
        assert request.system[1].text == "rules v1"
        assert by_source(request)["workspace/MEMORY.md"].text == "memory v1"
    await agent.call("second")
    third = model.agent_requests[2]
    assert third.system[1].text == "rules v2"
    assert by_source(third)["workspace/MEMORY.md"].text == "memory v2"


async def test_a_memory_url_workspace_works() -> None:
    url = f"memory://ws-{new_id()}"
    workspace = Workspace(url)
    workspace.write_text("AGENTS.md", "Remote rules.")
    workspace.write_text("MEMORY.md", "Remote memory.")
    workspace.write_text("knowledge/topic.md", "Remote knowledge.")
    agent, model = agent_on(None, WorkspaceMaterials(workspace=url))
    await agent.call("x")
    (request,) = model.agent_requests
    assert [p.name for p in request.system] == ["prompt", "AGENTS.md"]
    assert request.system[1].text == "Remote rules."
    assert [b.source_id for b in request.blocks] == [
        "workspace/MEMORY.md",
        "workspace/knowledge/topic.md",
    ]


async def test_the_agents_workspace_is_used_when_none_is_given() -> None:
    workspace = Workspace(f"memory://ws-{new_id()}")
    workspace.write_text("MEMORY.md", "Agent memory.")
    agent, model = agent_on(workspace, WorkspaceMaterials())
    await agent.call("x")
    assert [b.text for b in model.agent_requests[0].blocks] == ["Agent memory."]


async def test_without_a_workspace_only_instructions_are_added() -> None:
    agent, model = agent_on(None, WorkspaceMaterials(instructions=[instruction("a", "Rule A.")]))
    await agent.call("x")
    (request,) = model.agent_requests
    assert [p.name for p in request.system] == ["prompt", "instruction/a"]
    assert request.blocks == ()


async def test_the_load_budget_cuts_reference_files_and_records_it(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "AGENTS.md": "rules " * 200,
            "MEMORY.md": "memory " * 100,
            "knowledge/a.md": "alpha " * 100,
            "knowledge/b.md": "beta " * 100,
        },
    )
    probe, probe_model = agent_on(tmp_path, WorkspaceMaterials(max_context_tokens=None))
    await probe.call("x")
    est = probe_model.agent_requests[0].estimator
    memory = est.count("memory " * 100)
    budget = memory + est.count("alpha " * 100) // 2
    manifests: list[ContextManifest] = []
    agent, model = agent_on(
        tmp_path, WorkspaceMaterials(max_context_tokens=budget), manifests=manifests
    )
    await agent.call("x")
    (request,) = model.agent_requests
    blocks = by_source(request)
    assert list(blocks) == ["workspace/MEMORY.md", "workspace/knowledge/a.md"]
    assert blocks["workspace/MEMORY.md"].text == "memory " * 100
    cut = blocks["workspace/knowledge/a.md"].text
    assert cut.startswith("alpha alpha") and "load budget" in cut
    assert est.count(cut) <= budget - memory
    assert request.transforms == (
        "workspace_truncated:workspace/knowledge/a.md",
        "workspace_omitted:workspace/knowledge/b.md",
    )
    assert manifests[0].transforms == request.transforms
    # The load budget is not the request budget: instructions are never cut by it.
    assert request.system[1].text == "rules " * 200


async def test_the_cut_is_recorded_on_every_request_of_the_call(tmp_path: Path) -> None:
    write(tmp_path, {"MEMORY.md": "memory " * 100})

    def noop() -> str:
        """Do nothing."""
        return "done"

    agent, model = agent_on(
        tmp_path,
        WorkspaceMaterials(max_context_tokens=0),
        replies=[ScriptedModel.tool_call("noop"), "ok"],
        tools=[noop],
    )
    await agent.call("x")
    assert [r.transforms for r in model.agent_requests] == [
        ("workspace_omitted:workspace/MEMORY.md",),
    ] * 2
    assert all(r.blocks == () for r in model.agent_requests)


async def test_workspace_material_is_dropped_first_under_the_request_budget(tmp_path: Path) -> None:
    # Same group and priority: the larger file (knowledge, here) goes first.
    write(tmp_path, {"MEMORY.md": "memory " * 60, "knowledge/a.md": "alpha " * 90})

    async def status(request: ContextRequest) -> list[ContextBlock]:
        return [ContextBlock.runtime("latest", "build " * 80, priority=-200)]

    stack_extra = [ContextSources(sources=[context_source("build", status)]), BudgetFit()]
    probe, probe_model = agent_on(tmp_path, WorkspaceMaterials(), extra=stack_extra)
    await probe.call("x")
    full = probe_model.agent_requests[0]
    limit = estimate_request(full, shared_exact("o200k")) - 5  # exact near the limit
    agent, model = agent_on(tmp_path, WorkspaceMaterials(), extra=stack_extra, limit=limit)
    await agent.call("x")
    (request,) = model.agent_requests
    assert [b.source_id for b in request.blocks] == ["workspace/MEMORY.md", "source/build/latest"]
    assert request.transforms == ("omitted_for_budget:workspace/knowledge/a.md",)


async def test_a_missing_context_file_is_recorded(tmp_path: Path) -> None:
    agent, model = agent_on(tmp_path, WorkspaceMaterials(context_files=["docs/gone.md"]))
    await agent.call("x")
    assert model.agent_requests[0].transforms == ("workspace_missing:workspace/docs/gone.md",)


async def test_files_can_be_switched_off(tmp_path: Path) -> None:
    write(tmp_path, {"AGENTS.md": "rules", "MEMORY.md": "memory", "knowledge/a.md": "alpha"})
    materials = WorkspaceMaterials(agents_file=None, memory_file=None, knowledge_dir=None)
    agent, model = agent_on(tmp_path, materials)
    await agent.call("x")
    (request,) = model.agent_requests
    assert [p.name for p in request.system] == ["prompt"]
    assert request.blocks == ()


async def test_a_symlink_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("secret")
    root = tmp_path / "ws"
    (root / "knowledge").mkdir(parents=True)
    (root / "knowledge" / "link.md").symlink_to(outside)
    (root / "knowledge" / "ok.md").write_text("fine")
    agent, model = agent_on(root, WorkspaceMaterials())
    await agent.call("x")
    (request,) = model.agent_requests
    assert [b.text for b in request.blocks] == ["fine"]
    assert "secret" not in request.render()[-1].text
    assert request.transforms == ("workspace_refused:workspace/knowledge/link.md",)


def test_instruction_names_must_be_unique() -> None:
    with pytest.raises(ConfigurationError, match="two instructions are named 'a'"):
        WorkspaceMaterials(instructions=[instruction("a", "x"), instruction("a", "y")])


@pytest.mark.parametrize(("name", "text"), [("", "x"), ("a/b", "x"), ("ok", "  ")])
def test_instruction_arguments_are_validated(name: str, text: str) -> None:
    with pytest.raises(ConfigurationError):
        instruction(name, text)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"context_files": ["../secret.md"]},
        {"context_files": "notes.md"},
        {"memory_file": "/etc/passwd"},
        {"max_context_tokens": -1},
        {"instructions": ["just text"]},
    ],
)
def test_constructor_arguments_are_validated(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        WorkspaceMaterials(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------ scoped memory
async def test_each_user_sees_the_project_memory_and_only_their_own(tmp_path: Path) -> None:
    ids = {user: RequestIds(user_id=user, agent_id="agent") for user in ("alice", "bob")}
    write(
        tmp_path,
        {
            "MEMORY.md": "project: uses Python 3.11",
            memory_path("agent", ids["alice"]): "agent: answer in English",
            memory_path("user", ids["alice"]): "alice: prefers tabs",
            memory_path("user", ids["bob"]): "bob: prefers spaces",
        },
    )
    agent, model = agent_on(tmp_path, WorkspaceMaterials(), replies=["ok", "ok"])
    await agent.call("hi", RuntimeContext(user_id="alice", session_id="a"))
    await agent.call("hi", RuntimeContext(user_id="bob", session_id="b"))
    seen = {}
    for request in model.agent_requests:
        memory = [b for b in request.blocks if b.category == "memory"]
        seen[request.ids.user_id] = [b.text for b in memory]
        assert [b.source_id for b in memory] == [
            "workspace/MEMORY.md",
            f"workspace/{memory_path('agent', request.ids)}",
            f"workspace/{memory_path('user', request.ids)}",
        ]
    assert seen == {
        "alice": ["project: uses Python 3.11", "agent: answer in English", "alice: prefers tabs"],
        "bob": ["project: uses Python 3.11", "agent: answer in English", "bob: prefers spaces"],
    }
    # Without a memory folder, only the project's file is loaded.
    agent, model = agent_on(tmp_path, WorkspaceMaterials(memory_folder=None))
    await agent.call("hi", RuntimeContext(user_id="alice", session_id="a"))
    (request,) = model.agent_requests
    assert [b.text for b in request.blocks if b.category == "memory"] == [
        "project: uses Python 3.11"
    ]


# ------------------------------------------------------------ the file cache
async def test_unchanged_files_are_served_from_the_cache_and_changes_are_seen(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        {
            "AGENTS.md": "rules v1",
            "MEMORY.md": "memory v1",
            "knowledge/a.md": "fact a",
            "knowledge/deep/b.md": "fact b",
        },
    )
    agent, model = agent_on(tmp_path, WorkspaceMaterials(), replies=["ok"] * 6)
    await agent.call("first")
    await agent.call("second")
    first, second = model.agent_requests
    # Nothing changed: the second call got the very texts the first call read.
    assert first.system[1].text is second.system[1].text
    assert (
        by_source(first)["workspace/MEMORY.md"].text
        is by_source(second)["workspace/MEMORY.md"].text
    )

    # An in-place write of the same size, a new file in a nested folder, a removed file.
    (tmp_path / "MEMORY.md").write_text("memory v2")
    write(tmp_path, {"knowledge/deep/c.md": "fact c"})
    (tmp_path / "knowledge/a.md").unlink()
    await agent.call("third")
    third = model.agent_requests[2]
    blocks = by_source(third)
    assert blocks["workspace/MEMORY.md"].text == "memory v2"
    assert [s for s in blocks if s.startswith("workspace/knowledge/")] == [
        "workspace/knowledge/deep/b.md",
        "workspace/knowledge/deep/c.md",
    ]
    assert third.system[1].text is first.system[1].text  # AGENTS.md was not read again

    # A new user's memory file appears on that user's next call, and only for them.
    ids = RequestIds(user_id="carol", agent_id=agent.agent_id)
    await agent.call("fourth", RuntimeContext(user_id="carol", session_id="c"))
    write(tmp_path, {memory_path("user", ids): "carol: likes tests"})
    await agent.call("fifth", RuntimeContext(user_id="carol", session_id="c"))
    await agent.call("sixth", RuntimeContext(user_id="dave", session_id="d"))
    fourth, fifth, sixth = model.agent_requests[3:]
    own = f"workspace/{memory_path('user', ids)}"
    assert own not in by_source(fourth) and by_source(fifth)[own].text == "carol: likes tests"
    assert not any("carol" in b.text for b in sixth.blocks)


async def test_a_file_swapped_for_a_symlink_out_of_the_workspace_is_refused(
    tmp_path: Path,
) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside.md"
    write(root, {"MEMORY.md": "memory v1"})
    outside.write_text("secret")
    agent, model = agent_on(root, WorkspaceMaterials(), replies=["ok", "ok"])
    await agent.call("first")
    (root / "MEMORY.md").unlink()
    (root / "MEMORY.md").symlink_to(outside)
    await agent.call("second")
    second = model.agent_requests[1]
    assert "workspace/MEMORY.md" not in by_source(second)
    assert "workspace_refused:workspace/MEMORY.md" in second.transforms
    assert not any("secret" in b.text for b in second.blocks)


async def test_a_call_hands_on_one_system_tuple_and_follows_a_changed_one(
    tmp_path: Path,
) -> None:
    # Rounds of one call that bring the agent's same System tuple get the same joined tuple
    # (later layers then match it by identity); a System that changed is joined anew.
    write(tmp_path, {"AGENTS.md": "rules v1"})
    rounds = 0

    async def renamer(request: ModelRequest, call_next: Handler) -> ModelResponse:
        nonlocal rounds
        rounds += 1
        if rounds < 3:
            return await call_next(request)
        part = msgspec.structs.replace(request.system[0], text=f"round {rounds}")
        return await call_next(request.replace(system=(part,)))

    model = ScriptedModel(
        [ScriptedModel.tool_call("look"), ScriptedModel.tool_call("look"), "done"]
    )
    agent = HarnessAgent(
        model=model,
        system_prompt="You are the project assistant.",
        tools=[look],
        workspace=str(tmp_path),
        stack=[renamer, WorkspaceMaterials()],
        store="sqlite://",
    )
    await agent.call("go")
    first, second, third = model.agent_requests
    assert first.system is second.system
    assert [p.text for p in second.system] == ["You are the project assistant.", "rules v1"]
    assert [p.text for p in third.system] == ["round 3", "rules v1"]


def look() -> str:
    """Look around."""
    return "nothing new"
