"""Manifests are stored as deltas of the last one and read back whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from harness import ContextManifest, HarnessAgent, RuntimeContext
from harness.errors import WorkspaceError
from harness.manifest import ManifestItem, ManifestItems, Usage
from harness.sessions import SessionKey, open_store
from harness.sessions.manifest_log import CHAIN, ManifestDeltas, resolve
from harness.sessions.store import ManifestEvent, UsageEvent
from middleware import default_stack
from providers import ScriptedModel

CTX = RuntimeContext(user_id="u", session_id="s")


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return f"ran {command}: " + "output line\n" * 5


async def test_a_long_session_stores_small_deltas_and_reads_every_manifest_back(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    rounds = 45
    script = [ScriptedModel.tool_call("shell", {"command": f"step {i}"}) for i in range(rounds)]
    agent = HarnessAgent(
        model=ScriptedModel([*script, "done"]),
        tools=[shell],
        stack=default_stack(),
        store=url,
        max_rounds=rounds + 5,
    )
    seen: list[ContextManifest] = []
    async for event in agent.stream_events("go", CTX):
        if event.kind == "context_build" and event.manifest is not None:
            seen.append(event.manifest)
    assert len(seen) > CHAIN + 2

    store = open_store(url)
    try:
        key = SessionKey(user_id="u", agent_id=agent.agent_id, session_id="s")
        logged = await store.events(key, limit=10_000, kinds=("manifest",))
    finally:
        await store.aclose()
    stored = [e.event for e in logged if isinstance(e.event, ManifestEvent)]
    assert len(stored) == len(seen)
    deltas = [e for e in stored if e.base is not None]
    assert len(deltas) >= len(stored) // 2  # whole: short histories, compactions, one per CHAIN
    # A delta stores only what the last manifest lacked: a few items, not the history.
    assert max(len(e.manifest.items) for e in deltas) < 12
    assert sum(len(e.manifest.items) for e in stored) < sum(len(m.items) for m in seen) / 4
    read = resolve(stored)
    # The stored manifests also carry the provider's usage (known once the answer came; the
    # context_build event is emitted before the request is sent).
    assert all(m.usage is not None for m in read)
    assert [msgspec.structs.replace(m, usage=None) for m in read] == seen


def test_a_failed_commit_is_never_a_base() -> None:
    items = tuple(
        ManifestItem(kind="message", source_id=f"history/m{i}", tokens=i) for i in range(40)
    )
    first = _manifest("c1", items[:30])
    second = _manifest("c2", items[:35])
    deltas = ManifestDeltas()
    (whole,) = deltas.encode([first])
    deltas.committed()
    (lost,) = deltas.encode([second])  # this commit fails: not committed()
    assert lost.base == "c1"
    (again,) = deltas.encode([_manifest("c3", items)])
    assert again.base == "c1" and again.shared == 30  # not c2, which was never stored
    assert resolve([whole, again])[1].items == items


def test_a_delta_without_its_base_is_a_clear_error() -> None:
    orphan = ManifestEvent(manifest=_manifest("c9", ()), base="c1", shared=20)
    with pytest.raises(WorkspaceError, match="refers to call 'c1'"):
        resolve([orphan])


def test_usage_logged_after_its_round_answers_its_manifest() -> None:
    # The proxy hook's usage arrives after the round that stored the manifest; an agent's
    # manifest was stored with its usage, which a later record never replaces.
    items = tuple(ManifestItem(kind="message", source_id=f"m{i}", tokens=i) for i in range(30))
    agent_usage = Usage(prompt_tokens=10, completion_tokens=2, total_tokens=12)
    answered_one = msgspec.structs.replace(_manifest("c1", items), usage=agent_usage)
    deltas = ManifestDeltas()
    proxied = msgspec.structs.replace(
        _manifest("c2", items), estimated_input_tokens=1200, cache_expected=1024
    )
    stored = deltas.encode([answered_one, proxied, _manifest("c3", items)])
    assert stored[1].base == "c1"  # the proxy call's manifest is a delta: resolved as usual
    late = Usage(
        prompt_tokens=1200,
        completion_tokens=35,
        total_tokens=1235,
        cached_tokens=1024,
        cache_reported=True,
        cost_usd=2e-4,
    )
    usage = [
        UsageEvent(call_id="c2", purpose="agent", model="gpt-4o-mini", usage=late),
        UsageEvent(call_id="c1", purpose="agent", model="gpt-4o-mini", usage=late),
    ]
    first, second, third = resolve([stored[0], stored[1], usage[0], usage[1], stored[2]])
    assert first.usage == agent_usage  # stored with its round: kept
    assert second.usage == late and second.items == items
    assert second.cache_verdict == "agree"  # the verdict the late usage gives (`answered`)
    assert third.usage is None  # not answered (yet)
    assert resolve(stored)[1].usage is None  # without the usage events: as stored


def _manifest(call_id: str, items: tuple[ManifestItem, ...]) -> ContextManifest:
    return ContextManifest(
        call_id=call_id,
        purpose="agent",
        model="scripted",
        estimated_input_tokens=1,
        input_limit=10,
        counting_method="x",
        exact=False,
        items=ManifestItems(items),
    )


def test_the_cli_shows_every_manifest_of_a_delta_stored_session(tmp_path: Path) -> None:
    import anyio

    url = f"sqlite:///{tmp_path}/s.db"
    script = [ScriptedModel.tool_call("shell", {"command": f"step {i}"}) for i in range(25)]
    agent = HarnessAgent(
        model=ScriptedModel([*script, "done"]),
        tools=[shell],
        stack=default_stack(),
        store=url,
        max_rounds=30,
    )

    async def run() -> list[ContextManifest]:
        return [
            e.manifest
            async for e in agent.stream_events("go", CTX)
            if e.kind == "context_build" and e.manifest is not None
        ]

    seen = anyio.run(run)
    out = subprocess.run(
        [sys.executable, "-m", "harness", "manifests", "show", "--session", "s", "--user", "u",
         "--agent", agent.agent_id, "--store", url, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    shown = [msgspec.json.decode(line) for line in out.stdout.splitlines()]
    assert [m["call_id"] for m in shown] == [m.call_id for m in seen]
    assert [len(m["items"]) for m in shown] == [len(m.items) for m in seen]
    assert max(len(m.items) for m in seen) > 40
