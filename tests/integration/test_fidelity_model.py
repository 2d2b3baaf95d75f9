"""The fidelity benchmark with a real model: summaries come from it, and a rerun resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import _report, bench_fidelity, fidelity_model
from benchmarks.result import Result

from .openai_server import OpenAIServer, reply


def test_summaries_come_from_the_model_and_a_rerun_asks_nothing_again(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_fidelity, "SHARED_DIR", tmp_path / "no-shared")
    monkeypatch.setattr(fidelity_model, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    # One answer to everything: right for the questions about these two facts only.
    openai_server.default = reply("MODEL SUMMARY: build 48000, then 48017.")

    def run() -> Result:
        return _report.run_measure(
            bench_fidelity.measure,
            "smoke",
            name="fidelity",
            title="t",
            model="openai/test-model",
            api_base=openai_server.base_url,
        )

    first = run()
    asked = len(openai_server.requests)
    assert asked > 0, "the summaries were asked of the model"
    assert any("summaries written by openai/test-model" in n for n in first.notes)
    assert any("Every summary was written by openai/test-model" in n for n in first.notes)
    assert first.data["synthetic/8192/ours"]["summary_requests"] > 0
    # LangChain's summariser asked the model its own prompt.
    bodies = [str(r["messages"]) for r in openai_server.requests]
    assert any("<messages>" in b or "Messages to summarize" in b for b in bodies)

    # Recall: the same answer everywhere, so every strategy whose request reached the model
    # scores what the full history and no history score; a request over the window, nothing.
    ours = first.data["synthetic/8192/ours"]
    assert ours["questions"] > 0 and 0.0 < ours["recall"] < 1.0
    assert ours["recall_baselines"] == {
        "full context": ours["recall"],
        "no context": ours["recall"],
    }
    unmanaged = first.data["synthetic/8192/none (full history)"]
    assert unmanaged["overflows"] > 0 and unmanaged["recall"] <= ours["recall"]
    assert any("recall of" in line for line in first.headline)

    second = run()
    assert len(openai_server.requests) == asked, "a rerun reuses every kept answer"
    assert second.data["synthetic/8192/ours"] == first.data["synthetic/8192/ours"]
