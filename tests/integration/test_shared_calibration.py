"""The learned calibration lives in the session store: a new process counts as cautiously.

A model with no offline tokenizer is counted with the conservative bound, and the ratio of
what its server reports to that bound is learned per (model, api_base). Through litellm to
the real local server on a SQLite file and on the real PostgreSQL server of the session
tests: process A learns it; process B (the in-process learner forgotten, as in a fresh
process or another proxy replica) starts from the store's ratio at its first request. The
store only ever keeps the worst ratio seen and a factor above it, so it never under-counts.
"""

from __future__ import annotations

import pytest

from harness import HarnessAgent, RuntimeContext
from harness.sessions import open_store
from harness.tokens.calibration import LEARN_MARGIN, LEARNED, LearnedRow
from providers import LiteLLMClient
from tests.sessions.conftest import backend, pg_server, store_url

from .openai_server import OpenAIServer, reply

__all__ = ["backend", "pg_server", "store_url"]  # the session suite's store fixtures

pytestmark = pytest.mark.usefixtures("fresh_learning")

MODEL = "openai/mystery-coder-8k"
TURN = "We need to check the river gauge readings against the flood model again. " * 8


async def test_a_new_process_starts_from_the_stores_ratio(store_url: str) -> None:
    with OpenAIServer(model="mystery-coder-8k", window=8192, metadata="vllm") as server:
        server.default = reply("noted")
        base = server.base_url

        def agent() -> HarnessAgent:
            client = LiteLLMClient(MODEL, api_base=server.base_url, api_key="test")
            return HarnessAgent(model=client, store=store_url, stack=[])

        first = agent()
        for n in range(4):
            await first.call(f"turn {n}: {TURN}", RuntimeContext(session_id="a"))
        learned = LEARNED.factor_for(MODEL)
        assert learned < 1.0  # the bound counts more than the server: the factor fell
        assert first.store is not None
        await first.store.aclose()

        LEARNED.forget()  # a fresh process (or another replica) on the same store
        assert LEARNED.factor_for(MODEL) == 1.0
        second = agent()
        await second.load(RuntimeContext(session_id="b"))  # another session, too
        assert LEARNED.factor_for(MODEL) == learned  # the stored ratio before any request
        await second.call("hello", RuntimeContext(session_id="b"))
        assert second.store is not None
        await second.store.aclose()
    store = open_store(store_url)
    try:
        (row,) = await store.learned()
    finally:
        await store.aclose()
    assert row.model == MODEL and row.api_base == base
    assert row.observations == 5
    # never below the worst reported / estimated ratio seen, with the margin
    assert row.factor >= row.worst * LEARN_MARGIN - 1e-9


async def test_the_store_keeps_the_worst_ratio_of_all_writers(store_url: str) -> None:
    store = open_store(store_url)
    try:
        await store.learn([LearnedRow("m", "", worst=0.5, factor=0.6, observations=3)])
        await store.learn([LearnedRow("m", "", worst=0.4, factor=0.42, observations=2)])
        (row,) = await store.learned()
        # the lower factor, but never below the higher worst ratio × margin
        assert row.worst == 0.5 and row.factor == pytest.approx(0.5 * LEARN_MARGIN)
        assert row.observations == 5
        await store.learn([LearnedRow("m", "", worst=0.9, factor=0.945, observations=1)])
        (row,) = await store.learned()
        assert row.worst == 0.9 and row.factor == pytest.approx(0.945)  # a higher report wins
        LEARNED.merge(await store.learned())
        assert LEARNED.factor_for("m") >= 0.945
        # a process that learned less cautiously is raised to the stored worst at once
        LEARNED.forget()
        LEARNED.observe("m", "", estimated=1000, reported=300)
        assert LEARNED.factor_for("m") < 0.9
        LEARNED.merge(await store.learned())
        assert LEARNED.factor_for("m") >= 0.9 * LEARN_MARGIN - 1e-9
    finally:
        await store.aclose()
