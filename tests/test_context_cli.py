"""``harness context show`` end to end through subprocess: what the model received, per round.

A short session is recorded by a real `HarnessAgent` with `ScriptedModel` in a SQLite file (and
once in a real PostgreSQL database): a tool result big enough to be offloaded, a fragment that
fits and one too big for the budget. The command's table, JSON lines and HTML page are checked
against the manifests and messages the store holds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from harness import ContextPolicy, Fragments, HarnessAgent, RuntimeContext
from harness.manifest import ContextManifest, Transform
from harness.messages import Message
from harness.sessions import Event, ManifestEvent, MessageEvent, SessionKey, StoredState, open_store
from harness.types import Middleware
from middleware import BudgetFit, Compaction, FragmentEditor, PairValidation, ToolResultOffload
from middleware.context_sources import SOURCE_UNAVAILABLE
from providers import ScriptedModel

from .sessions.conftest import new_database, pg_server
from .sessions.pg_server import PostgresServer

__all__ = ["pg_server"]  # the PostgreSQL fixture of the session suite, shared

ROOT = Path(__file__).resolve().parent.parent
KEY = SessionKey("alice", "agent", "s1")
CTX = RuntimeContext(user_id="alice", session_id="s1")
TASK = "list the files <b>now</b>"
RULE = "Never use floating point for money."
PINNED = "Answer in English."


def shell(command: str) -> str:
    """Run a command.

    Args:
        command: the command line.
    """
    return f"ran {command}\n" + "file.txt\n" * 3_000


@dataclass
class Recorded:
    """A recorded session: its store URL and the manifests of its agent requests, in order."""

    url: str
    manifests: list[ContextManifest]
    rule_id: str
    big_id: str


def record(url: str) -> Recorded:
    """Run two agent calls on the store at ``url``, with fragments added in between."""

    async def main() -> Recorded:
        store = open_store(url)
        try:
            stack: list[Middleware] = [
                FragmentEditor(),
                ToolResultOffload(),
                BudgetFit(),
                Compaction(),
                PairValidation(),
            ]
            model = ScriptedModel(
                [ScriptedModel.tool_call("shell", {"command": "ls"}), "listed", "ok"],
                window=None,
            )
            agent = HarnessAgent(
                model=model,
                tools=[shell],
                stack=stack,
                store=store,
                system_prompt="You are careful.",
                policy=ContextPolicy(max_input_tokens=6_000),
            )
            await agent.call(TASK, CTX)
            fragments = Fragments(store, KEY)
            rule = await fragments.add(RULE, title="money rule")
            big = await fragments.add("word " * 9_000, title="huge")
            await fragments.add(PINNED, kind="system", title="language")
            reply = agent.state(CTX).working_history[-1]
            await fragments.edit(reply.id, content="listed (edited)")
            await agent.call("what next?", CTX)
            manifests = [
                e.event.manifest
                for e in await store.events(KEY, kinds=("manifest",), limit=100)
                if isinstance(e.event, ManifestEvent)
            ]
            return Recorded(url, manifests, rule.id, big.id)
        finally:
            await store.aclose()

    return anyio.run(main)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The session, recorded once in a SQLite file for the whole module."""
    return record(f"sqlite://{tmp_path_factory.mktemp('context') / 'sessions.db'}")


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m harness context show ARGS``."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ROOT), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "harness", "context", "show", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def json_lines(done: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def at(rec: Recorded) -> list[str]:
    return ["--session", "s1", "--user", "alice", "--store", rec.url]


def test_the_latest_call_as_json_lines_matches_its_manifest(recorded: Recorded) -> None:
    lines = json_lines(harness(*at(recorded), "--json"))
    latest = recorded.manifests[-1]
    call, *rest = lines
    assert call["type"] == "call" and call["call_id"] == latest.call_id
    assert (call["position"], call["calls"]) == (len(recorded.manifests), len(recorded.manifests))
    items = [line for line in rest if line["type"] == "item"]
    assert [(i["source_id"], i["tokens"]) for i in items] == [
        (i.source_id, i.tokens) for i in latest.items
    ]
    assert all(i["share"] == pytest.approx(int(str(i["tokens"])) / 6_000) for i in items)
    by_source = {str(i["source_id"]): i for i in items}
    assert by_source[f"fragment:{recorded.rule_id}@1"]["preview"] == f"money rule: {RULE}"
    first_user = next(i for i in items if i["role"] == "user")
    assert first_user["preview"] == TASK  # the stored message's text
    assistants = [str(i["preview"]) for i in items if i["role"] == "assistant"]
    assert "listed (edited)" in assistants and "listed" not in assistants  # as the model saw it
    pinned = next(i for i in items if str(i["source_id"]).startswith("system/fragment:"))
    assert pinned["preview"] == PINNED
    omissions = [line["transform"] for line in rest if line["type"] == "omission"]
    assert omissions == [f"omitted_for_budget:fragment:{recorded.big_id}@1"]


def test_the_table_shows_items_bars_and_what_was_left_out(recorded: Recorded) -> None:
    done = harness(*at(recorded))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert recorded.manifests[-1].call_id in out.splitlines()[0]
    assert "validation passed" in out
    for item in recorded.manifests[-1].items:
        assert item.source_id in out
    assert f"money rule: {RULE}" in out
    assert "left out (1)" in out and f"fragment:{recorded.big_id}@1" in out
    schema = next(line for line in out.splitlines() if "tool/read_file" in line)
    assert re.search(r"\d+\.\d%\s+[█▏▎▍▌▋▊▉]", schema), schema


def test_an_earlier_call_by_prefix_shows_its_transforms(recorded: Recorded) -> None:
    offloaded = next(
        m for m in recorded.manifests if any("tool_result_offload" in t for t in m.transforms)
    )
    lines = json_lines(harness(*at(recorded), "--call", offloaded.call_id[:8], "--json"))
    assert lines[0]["call_id"] == offloaded.call_id
    transforms = [line["transform"] for line in lines if line["type"] == "transform"]
    assert transforms == list(offloaded.transforms)
    tool = next(line for line in lines if line.get("role") == "tool")
    assert "offloaded" in str(tool["preview"]).lower()  # the rewritten copy the model saw


def test_the_html_page_is_self_contained_and_has_every_item(
    recorded: Recorded, tmp_path: Path
) -> None:
    page = tmp_path / "context.html"
    done = harness(*at(recorded), "--html", str(page), "--json")
    assert json_lines(done)[0]["type"] == "call"  # stdout stays JSON lines only
    html = page.read_text("utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for banned in ("<script", "http://", "https://", "src=", "<link", "@import", "url("):
        assert banned not in html, banned
    assert "<svg" in html and "<style>" in html
    for item in recorded.manifests[-1].items:
        assert item.source_id in html
    assert f"omitted_for_budget:fragment:{recorded.big_id}@1" in html
    assert "&lt;b&gt;now&lt;/b&gt;" in html and "<b>now</b>" not in html


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--session", "nope"], 1, "no session 'nope'"),
        (["--session", "s1"], 1, "no session 's1'"),  # another user's session
        (["--session", "s1", "--user", "alice", "--call", "zzzz"], 1, "no call 'zzzz'"),
        (["--session", "s1", "--user", "alice", "--call", ""], 2, "--call must not be empty"),
        (["--session", "s1", "--user", "alice", "--html", "/nonexistent/x.html"], 2, "could not"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    recorded: Recorded, args: list[str], status: int, message: str
) -> None:
    done = harness(*args, "--store", recorded.url)
    assert done.returncode == status, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == ""


def test_a_session_without_requests_and_a_missing_store(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'sessions.db'}"

    async def only_fragments() -> None:
        store = open_store(url)
        await Fragments(store, KEY).add("a rule")
        await store.aclose()

    anyio.run(only_fragments)
    done = harness("--session", "s1", "--user", "alice", "--store", url)
    assert done.returncode == 1 and "recorded no model request" in done.stderr
    missing = harness("--session", "s1", "--store", f"sqlite://{tmp_path / 'none.db'}")
    assert missing.returncode == 2 and "no session database" in missing.stderr


def test_on_postgresql(pg_server: PostgresServer) -> None:
    rec = record(new_database(pg_server))
    lines = json_lines(harness(*at(rec), "--json"))
    assert lines[0]["call_id"] == rec.manifests[-1].call_id
    previews = {line.get("source_id"): line.get("preview") for line in lines}
    assert previews[f"fragment:{rec.rule_id}@1"] == f"money rule: {RULE}"
    assert [line["transform"] for line in lines if line["type"] == "omission"] == [
        f"omitted_for_budget:fragment:{rec.big_id}@1"
    ]


def test_help() -> None:
    done = harness("--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: harness context show")
    assert "--html FILE" in done.stdout


def test_a_request_that_failed_to_build_is_shown_as_such(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'sessions.db'}"
    failed = ContextManifest(
        call_id="failed-call",
        purpose="agent",
        model="scripted",
        estimated_input_tokens=-1,
        input_limit=-1,
        counting_method="unavailable",
        exact=False,
        transforms=(Transform(SOURCE_UNAVAILABLE, "source/tickets/:timeout"),),
        validation="build_failed",
        error="SourceError",
    )

    async def main() -> None:
        store = open_store(url)
        events: list[Event] = [
            MessageEvent(message=Message.user("hi")),
            ManifestEvent(manifest=failed),
        ]
        await store.commit(KEY, expected_version=0, events=events, state=StoredState())
        await store.aclose()

    anyio.run(main)
    page = tmp_path / "failed.html"
    done = harness("--session", "s1", "--user", "alice", "--store", url, "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert "tokens unavailable" in done.stdout and "validation build_failed" in done.stdout
    assert "error: SourceError" in done.stdout
    assert "left out (1)" in done.stdout and "source_unavailable:source/tickets/" in done.stdout
    assert "build_failed" in page.read_text("utf-8")
