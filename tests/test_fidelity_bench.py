"""The fidelity benchmark scores availability right, and runs without the shared data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import _report, bench_fidelity
from benchmarks.bench_fidelity import Sent, Trace, score
from benchmarks.bench_tokens_sent import Counter
from benchmarks.peers import mask_observations
from benchmarks.referents import FAR_TOKENS, needs, plant_facts, referents
from benchmarks.workloads import request_points
from harness.messages import Message, ToolCall
from harness.tokens import estimator_for

FACT = "src/app/settings_v2.toml"
HASH = "9f3c2a71e0"


def _call(call_id: str, **arguments: str) -> Message:
    return Message.assistant(
        tool_calls=[ToolCall(id=call_id, name="bash", arguments=json.dumps(arguments))]
    )


def planted() -> list[Message]:
    """A run whose third action quotes a path and a hash its first tool output showed."""
    filler = "".join(f"log line {i}: nothing to see here\n" for i in range(800))
    return [
        Message.user("Find the config the build used and check it."),
        _call("c1", command="grep -r config build.log"),
        Message.tool("c1", f"build used {FACT} at commit {HASH}\n", name="bash"),
        _call("c2", command="cat build.log"),
        Message.tool("c2", filler, name="bash"),  # pushes the fact far back
        _call("c3", command=f"git show {HASH}:{FACT}"),
        Message.tool("c3", "ok", name="bash"),
        Message.assistant("done"),
    ]


def test_referents_name_paths_hashes_numbers_identifiers_and_quotes() -> None:
    found = referents(f'git show {HASH}:{FACT} --stat 4217 my_function "exact phrase"')
    assert {FACT, HASH, "4217", "my_function", "exact phrase"} <= found
    assert "show" not in found and "stat" not in found  # plain words are not referents


def test_a_planted_fact_a_strategy_drops_lowers_its_availability() -> None:
    messages = planted()
    est = estimator_for("gpt-4o", exact=True)
    points = request_points(messages)
    wanted = needs(messages, points, [0] * len(messages), est.count_message)
    assert wanted[3].referents == ("build.log",)  # the second action names the log it saw
    assert set(wanted[5].referents) >= {FACT, HASH}
    assert set(wanted[5].far) >= {FACT, HASH}  # the filler is more than FAR_TOKENS long
    assert est.count_message(messages[4]) > FAR_TOKENS

    system = Message.system("You are an agent.")
    full, masked = Trace("full"), Trace("masked")
    for point in points:
        full.sent.append(Sent("agent", point, [system, *messages[:point]]))
        # Keeping only the newest observation drops the one that showed the fact.
        masked.sent.append(Sent("agent", point, [system, *mask_observations(messages[:point], 1)]))
    counter = Counter(0)
    kept = score(full, 100_000, counter, wanted)
    dropped = score(masked, 100_000, counter, wanted)
    assert kept["availability"] == 1.0 and kept["far_availability"] == 1.0
    assert dropped["availability"] < kept["availability"]
    assert dropped["far_availability"] == 0.0
    assert dropped["usd_openai"] < kept["usd_openai"]  # cheaper, and it shows
    # A request over the window is rejected: nothing of it is available.
    rejected = score(full, 1_000, counter, wanted)
    assert rejected["overflows"] > 0 and rejected["availability"] < kept["availability"]
    (row,) = [row for row in rejected["per_point_availability"] if row[0] == 5]
    assert row[1] == 0 and row[2] >= 2  # none of the fact's referents reached the model


def test_planted_facts_are_quoted_back_by_a_later_action() -> None:
    from benchmarks.generators import synthetic_trajectories

    run = synthetic_trajectories(seed=0)[0]
    messages = plant_facts(run.messages, run=0)
    est = estimator_for("gpt-4o", exact=True)
    wanted = needs(messages, request_points(messages), [0] * len(messages), est.count_message)
    planted_refs = {r for need in wanted.values() for r in need.referents if "planted" in r}
    assert planted_refs, "a planted file must be among the referents of a later action"


def test_the_benchmark_runs_without_the_shared_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_fidelity, "SHARED_DIR", tmp_path / "no-shared")
    result = _report.run_measure(bench_fidelity.measure, "smoke", name="fidelity", title="t")
    assert result.workload.startswith("synthetic (synthetic)")
    assert "planted facts" in result.workload
    rows = result.tables[0].rows
    names = {row[1] for row in rows}
    assert {
        "ours",
        "ours + masking M=10",
        "LangChain",
        "masking M=5",
        "none (full history)",
    } <= names
    ours = result.data["synthetic/8192/ours"]
    assert ours["overflows"] == 0 and ours["invalid_pairs"] == 0
    assert ours["referents"] > 0 and 0.0 <= ours["availability"] <= 1.0
    assert [g.met for g in result.goals][-1] is True
