"""ProviderCompaction: an agent session whose server compacts its history (OpenAI Responses).

The agent runs the default stack with `ProviderCompaction` after Compaction, through
`ResponsesClient` and litellm to `OpenAIServer`'s ``/v1/responses`` route, which compacts
past the ``compact_threshold`` asked for and bills what each request sent. So these tests
read what the server received (the compaction item in place of the turns it stands for),
what it billed over a whole session, and what the session's log and manifests say.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import ContextPolicy, HarnessAgent, Message, RuntimeContext
from harness.markers import PROVIDER_COMPACTED
from harness.sessions import open_store
from harness.sessions.store import ManifestEvent, SessionKey, WarningEvent
from harness.types import Middleware
from middleware import Compaction, ProviderCompaction, default_stack
from middleware.provider_compaction import STAND_IN_TEXT
from providers import LiteLLMClient, ResponsesClient

from .openai_server import OpenAIServer, Reply, error, reply, tool_call, unknown_parameter

pytestmark = pytest.mark.integration

MODEL = "openai/gpt-4o"
SYSTEM = "You are a careful repository assistant."
THRESHOLD = 1_500


def _probe(path: str) -> str:
    """Read a file of the project."""
    return f"contents of {path}: " + "line of code; " * 80


@dataclass
class Session:
    """What one agent session left: the server's records, the log, the working history."""

    server: OpenAIServer
    manifests: list[tuple[str, ...]]
    warnings: list[WarningEvent]
    history: tuple[Message, ...]
    answer: str


def _stack(provider: ProviderCompaction | None) -> list[Middleware]:
    stack = default_stack()
    if provider is not None:
        at = next(n for n, m in enumerate(stack) if isinstance(m, Compaction))
        stack.insert(at + 1, provider)
    return stack


async def _session(
    tmp_path: Path,
    server: OpenAIServer,
    *,
    provider: ProviderCompaction | None,
    rounds: int = 8,
    client: Any = None,
    before: tuple[Message, ...] = (),
) -> Session:
    server.push(
        *[tool_call("_probe", {"path": f"src/m{i}.py"}) for i in range(rounds)],
        reply("all read"),
    )
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    agent = HarnessAgent(
        model=client or ResponsesClient(MODEL, api_base=server.base_url, api_key="test"),
        tools=[_probe],
        stack=_stack(provider),
        system_prompt=SYSTEM,
        workspace=str(tmp_path),
        store=url,
    )
    ctx = RuntimeContext(user_id="u", session_id="pc")
    if before:
        agent.state(ctx).append(*before)
    answer = await agent.call("read every module", ctx)
    history = tuple(agent.state(ctx).working_history)
    store = open_store(url)
    try:
        log = [e.event for e in await store.events(SessionKey("u", "agent", "pc"), limit=1_000)]
    finally:
        await store.aclose()
    return Session(
        server=server,
        manifests=[e.manifest.transforms for e in log if isinstance(e, ManifestEvent)],
        warnings=[e for e in log if isinstance(e, WarningEvent)],
        history=history,
        answer=answer.text,
    )


def _compactions(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [i for i in body["input"] if i.get("type") == "compaction"]


async def test_the_item_the_server_made_is_sent_instead_of_the_turns_it_stands_for(
    tmp_path: Path,
) -> None:
    with OpenAIServer() as server:
        done = await _session(
            tmp_path, server, provider=ProviderCompaction(trigger=THRESHOLD), rounds=12
        )
    assert done.answer == "all read"
    asked = [{"type": "compaction", "compact_threshold": THRESHOLD}]
    assert all(body["context_management"] == asked for body in server.requests)
    made = list(server.compacted)
    assert made, server.input_tokens  # the session passed the threshold
    # the first request past the threshold is answered with an item, the next one sends it
    # in place of everything before, the question too
    compacting = [n for n, t in enumerate(server.input_tokens) if t > THRESHOLD]
    assert compacting and not _compactions(server.requests[compacting[0]])
    after = server.requests[compacting[0] + 1]
    (sent,) = _compactions(after)
    assert sent["id"] == made[0] and after["input"][0] == sent
    assert not any(i.get("content") == "read every module" for i in after["input"])
    assert after["input"][1]["type"] == "function_call"  # the turn after the compacted ones
    # every later request sends the newest item the server made before it
    assert len(made) == len(compacting) >= 2
    for n, body in enumerate(server.requests[compacting[0] + 1 :], start=compacting[0] + 1):
        (item,) = _compactions(body)
        assert item["id"] == made[sum(c < n for c in compacting) - 1]
    # the working history stays whole and readable; the item rides on a message's metadata
    assert done.history[0].text == "read every module"
    assert not any(m.text == STAND_IN_TEXT for m in done.history)
    marked = [m for m in done.history if m.meta(PROVIDER_COMPACTED)]
    assert marked and marked[-1].meta(PROVIDER_COMPACTED)["id"] == made[-1]
    assert marked[-1].meta(PROVIDER_COMPACTED)["model"] == MODEL
    # the manifests say what was asked and sent; the log says what the server made
    assert all(f"provider_compaction:asked@{THRESHOLD}" in t for t in done.manifests)
    assert sum(any(x.startswith("provider_compaction:sent@") for x in t) for t in done.manifests)
    assert len([w for w in done.warnings if w.code == "provider_compaction"]) == len(made)
    assert not any(x.startswith("history_compaction") for t in done.manifests for x in t)


async def test_a_long_session_is_billed_fewer_input_tokens(tmp_path: Path) -> None:
    rounds = 12
    with OpenAIServer() as plain:
        base = await _session(tmp_path / "plain", plain, provider=None, rounds=rounds)
    with OpenAIServer() as server:
        native = await _session(
            tmp_path / "native",
            server,
            provider=ProviderCompaction(trigger=THRESHOLD),
            rounds=rounds,
        )
    assert base.answer == native.answer == "all read"
    assert len(plain.input_tokens) == len(server.input_tokens) == rounds + 1
    without, with_ = sum(plain.input_tokens), sum(server.input_tokens)
    print(f"billed input over {rounds + 1} requests: without {without:,}, with {with_:,}")
    assert with_ < 0.6 * without, (with_, without)
    # no request billed more than the plain one at the same round
    assert all(w <= p for w, p in zip(server.input_tokens, plain.input_tokens, strict=True))


async def test_a_refused_option_is_resent_without_and_not_asked_again(tmp_path: Path) -> None:
    with OpenAIServer(compaction=False) as server:
        done = await _session(
            tmp_path, server, provider=ProviderCompaction(trigger=THRESHOLD), rounds=3
        )
    assert done.answer == "all read"
    # one refusal, then the same request without the option, and the session stops asking
    assert "context_management" in server.requests[0]
    assert all("context_management" not in body for body in server.requests[1:])
    assert len(server.requests) == 3 + 1 + 1
    assert len(server.input_tokens) == 3 + 1
    assert "provider_compaction:refused" in done.manifests[1]
    assert not any(x.startswith("provider_compaction:asked") for t in done.manifests[1:] for x in t)


async def test_another_bad_request_is_raised_not_resent(tmp_path: Path) -> None:
    from harness.errors import ProviderBadRequest

    with OpenAIServer() as server:
        server.push(error(400, unknown_parameter("temperature")))
        with pytest.raises(ProviderBadRequest) as caught:
            await _session(
                tmp_path, server, provider=ProviderCompaction(trigger=THRESHOLD), rounds=0
            )
    assert "temperature" in str(caught.value)
    assert len(server.requests) == 1  # not taken for a refusal of the option


async def test_an_item_the_server_cannot_read_is_dropped_for_the_whole_history(
    tmp_path: Path,
) -> None:
    stale = {
        "type": "compaction",
        "id": "cmp_old",
        "encrypted_content": "gAAAAstale",
        "model": MODEL,
    }
    before = (
        Message.user("an earlier question"),
        Message.assistant("an earlier answer", metadata={PROVIDER_COMPACTED: stale}),
    )
    with OpenAIServer() as server:
        done = await _session(
            tmp_path,
            server,
            provider=ProviderCompaction(trigger=THRESHOLD),
            rounds=1,
            before=before,
        )
    assert done.answer == "all read"
    assert _compactions(server.requests[0])[0]["id"] == "cmp_old"  # tried, and refused
    resent = server.requests[1]
    assert not _compactions(resent)
    assert resent["input"][0] == {"role": "user", "content": "an earlier question"}
    assert "provider_compaction:refused" in done.manifests[1]


async def test_an_item_made_for_another_model_is_not_sent(tmp_path: Path) -> None:
    other = {
        "type": "compaction",
        "id": "cmp_o",
        "encrypted_content": "gAAAAo",
        "model": "openai/o3",
    }
    before = (
        Message.user("an earlier question"),
        Message.assistant("an earlier answer", metadata={PROVIDER_COMPACTED: other}),
    )
    with OpenAIServer() as server:
        await _session(
            tmp_path,
            server,
            provider=ProviderCompaction(trigger=THRESHOLD),
            rounds=1,
            before=before,
        )
    assert all(not _compactions(body) for body in server.requests)
    assert server.requests[0]["input"][0] == {"role": "user", "content": "an earlier question"}


async def test_a_chat_completions_client_gets_the_request_unchanged(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        client = LiteLLMClient(MODEL, api_base=server.base_url, api_key="test")
        done = await _session(
            tmp_path,
            server,
            provider=ProviderCompaction(trigger=THRESHOLD),
            rounds=2,
            client=client,
        )
    assert done.answer == "all read"
    assert set(server.paths) == {"/v1/chat/completions"}
    assert all("context_management" not in body for body in server.requests)
    assert not any(x.startswith("provider_compaction") for t in done.manifests for x in t)


def test_the_trigger_is_checked_and_turned_into_a_threshold() -> None:
    from harness.errors import ConfigurationError

    assert ProviderCompaction().threshold(100_000) == 60_000
    assert ProviderCompaction(trigger=0.01).threshold(50_000) == 1_000  # OpenAI's minimum
    assert ProviderCompaction(trigger=4_000).threshold(100_000) == 4_000
    for bad in (0.0, 1.5, 999, True, "60%"):
        with pytest.raises(ConfigurationError):
            ProviderCompaction(trigger=bad)  # type: ignore[arg-type]


async def test_a_resumed_session_sends_the_item_its_log_kept(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        await _session(tmp_path, server, provider=ProviderCompaction(trigger=THRESHOLD))
        made = list(server.compacted)
        assert made
        server.push(reply("resumed"))
        agent = HarnessAgent(  # as a new process would: nothing in memory
            model=ResponsesClient(MODEL, api_base=server.base_url, api_key="test"),
            tools=[_probe],
            stack=_stack(ProviderCompaction(trigger=THRESHOLD)),
            system_prompt=SYSTEM,
            workspace=str(tmp_path),
            store=f"sqlite:///{tmp_path / 'sessions.db'}",
        )
        answer = await agent.call("and now?", RuntimeContext(user_id="u", session_id="pc"))
    assert answer.text == "resumed"
    body = server.requests[-1]
    assert body["input"][0] == {
        "type": "compaction",
        "id": made[-1],
        "encrypted_content": server.encrypted(made[-1]),
    }
    assert body["input"][-1] == {"role": "user", "content": "and now?"}


def _summaries_or(calls: list[int], rounds: int) -> Any:
    """Answer in-place summary requests with a summary, agent requests with a probe."""

    def answer(body: dict[str, Any]) -> Reply:
        if body.get("tool_choice") == "none":
            return reply("SUMMARY: read the modules src/m0.py onwards; keep going.")
        calls.append(len(calls))
        if len(calls) <= rounds:
            return tool_call("_probe", {"path": f"src/m{len(calls)}.py"})
        return reply("all read")

    return answer


@pytest.mark.parametrize("compaction", [True, False], ids=["server-compacts", "server-refuses"])
async def test_the_default_trigger_is_below_ours_and_ours_stays_the_fallback(
    tmp_path: Path, compaction: bool
) -> None:
    limit, rounds = 6_000, 30
    calls: list[int] = []
    with OpenAIServer(compaction=compaction, default=_summaries_or(calls, rounds)) as server:
        agent = HarnessAgent(
            model=ResponsesClient(MODEL, api_base=server.base_url, api_key="test"),
            tools=[_probe],
            stack=_stack(ProviderCompaction()),
            system_prompt=SYSTEM,
            workspace=str(tmp_path),
            store=f"sqlite:///{tmp_path / 'sessions.db'}",
            policy=ContextPolicy(max_input_tokens=limit),
            max_rounds=rounds + 5,
        )
        ctx = RuntimeContext(user_id="u", session_id="fb")
        assert (await agent.call("read every module", ctx)).text == "all read"
        store = open_store(f"sqlite:///{tmp_path / 'sessions.db'}")
        try:
            log = [e.event for e in await store.events(SessionKey("u", "agent", "fb"), limit=5_000)]
        finally:
            await store.aclose()
    manifests = [e.manifest.transforms for e in log if isinstance(e, ManifestEvent)]
    ours = [t for t in manifests if any(x.startswith("history_compaction") for x in t)]
    assert ours  # the readable history passed our trigger: our Compaction ran either way
    if compaction:
        assert f"provider_compaction:asked@{int(0.6 * limit)}" in manifests[0]
        assert server.compacted
        first = next(n for n, t in enumerate(server.input_tokens) if t > 0.6 * limit)
        assert all(t <= 0.6 * limit + 700 for t in server.input_tokens[first + 1 :])
    else:
        assert "provider_compaction:refused" in manifests[1]
        assert not server.compacted
    print(
        f"compaction={compaction}: ours ran {len(ours)}x, server items {len(server.compacted)}, "
        f"billed {sum(server.input_tokens):,} over {len(server.input_tokens)} requests"
    )
    # whatever the server did, no request went over the limit
    assert max(server.input_tokens) <= limit
