"""The benchmark suite runs and its output is right: structure, numbers, workload, checks.

Every benchmark runs here in ``--smoke`` mode (a few seconds each); what is checked is the
correctness of what it reports, never its speed.
"""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from benchmarks import _report, bench_overhead, peers, trajectories, workloads
from benchmarks.__main__ import BENCHMARKS, main
from benchmarks.result import Result, ResultShapeError, to_result
from harness.agent.loop import HarnessAgent, RuntimeContext
from harness.messages import Message
from harness.sessions.redaction import redact_message
from providers.scripted import ScriptedModel

SYSTEMS_OVERHEAD = {"ours", "ours, in its agent", "LangChain", "litellm"}


def _numbers(value: Any) -> list[float]:
    """Every number inside ``value`` (nested dicts and lists)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    return []


def _run(name: str, out: Path, *extra: str) -> Result:
    status = main([name, "--smoke", "--out", str(out), *extra])
    assert status == 0
    result = _report.load_result(out / f"{name}.json")  # the saved file reads back as a Result
    assert result.name == name
    assert result.status == "ok"
    assert result.mode == "smoke"
    assert result.workload, "every benchmark names its workload"
    report = (out / "report.md").read_text("utf-8")
    assert "## Machine" in report and "## Versions" in report
    assert result.workload in report
    return result


# ---------------------------------------------------------------------------- workloads
def _traj(path: Path, history: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"history": history}), "utf-8")
    return path


def test_trajectory_parsing_reads_string_tool_calls_and_splits_off_system(tmp_path: Path) -> None:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent.", "agent": "main"},
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug."}]},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": "[{'function': {'arguments': '{\"command\": \"ls\"}', 'name': 'bash'}, 'id': 'call_a', 'type': 'function'}]",
            "thought": "Looking.",
        },
        {"role": "tool", "content": "a.py", "tool_call_ids": "['call_a']"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": json.dumps(
                [{"function": {"arguments": "{}", "name": "submit"}, "id": "call_b"}]
            ),
        },
    ]
    run = trajectories.load_trajectory(_traj(tmp_path / "one.traj", history))
    assert run.system == "You are an agent."
    assert [m.role for m in run.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert run.messages[0].text == "Fix the bug."
    assert run.messages[1].tool_calls[0].name == "bash"
    assert run.messages[1].tool_calls[0].arguments == '{"command": "ls"}'
    assert run.messages[2].tool_call_id == "call_a" and run.messages[2].name == "bash"
    # the unanswered call gets a placeholder result, so pairs stay valid
    assert run.messages[4].tool_call_id == "call_b"
    assert run.messages[4].text == trajectories.NO_OUTPUT


def test_sessions_replay_back_to_back_with_fresh_ids(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    folder = shared / "data" / "swe-agent-trajectories"
    folder.mkdir(parents=True)
    _traj(
        folder / "a.traj",
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "task"},
            {
                "role": "assistant",
                "content": "go",
                "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "out", "tool_call_ids": ["c1"]},
        ],
    )
    session = workloads.make_session(9, shared=shared)
    assert session.source == "real" and session.copies == 3
    assert "fresh message and tool-call ids" in session.description
    ids = [m.id for m in session.messages]
    assert len(ids) == len(set(ids))
    call_ids = [c.id for m in session.messages for c in m.tool_calls]
    assert len(call_ids) == len(set(call_ids)) == 3
    # each copy's tool result answers that copy's call, and the seams get a bridge reply
    for index, message in enumerate(session.messages):
        if message.role == "tool":
            assert message.tool_call_id in {c.id for c in session.messages[index - 1].tool_calls}
    assert [m.text for m in session.messages[:6]] == [
        "task",
        "go",
        "out",
        workloads.BRIDGE,
        "task",
        "go",
    ]
    assert session.system_prompt == "sys"


def test_synthetic_sessions_are_used_without_shared_data_and_are_deterministic(
    tmp_path: Path,
) -> None:
    first = workloads.make_session(120, shared=tmp_path / "absent")
    second = workloads.make_session(120, shared=tmp_path / "absent")
    assert first.source == "synthetic" and first.name == "synthetic"
    assert [m.text for m in first.messages] == [m.text for m in second.messages]
    kinds = {m.role for m in first.messages}
    assert kinds == {"user", "assistant", "tool"}
    assert any(ord(ch) > 0x4E00 for m in first.messages for ch in m.text[:400]), "some CJK text"


def test_request_ready_never_ends_inside_a_tool_group() -> None:
    session = workloads.make_session(300)
    for n in range(2, 80):
        cut = workloads.request_ready(session.messages, n)
        assert len(cut) <= n
        last = cut[-1]
        assert not (last.role == "assistant" and last.tool_calls)
        if last.role == "tool":
            start = len(cut) - 1
            while cut[start - 1].role == "tool":
                start -= 1
            asked = {c.id for c in cut[start - 1].tool_calls}
            assert asked == {m.tool_call_id for m in cut[start:]}


async def test_replay_feeds_the_recording_through_the_agent(tmp_path: Path) -> None:
    session = workloads.history(60)
    inner = ScriptedModel(model="gpt-4o", default="unused")
    client = workloads.ReplayClient(inner, session.messages)
    agent = HarnessAgent(
        model=client,
        system_prompt=session.system_prompt,
        tools=workloads.replay_tools(session.messages, skip=["read_file"]),
        workspace=str(tmp_path),
        max_rounds=1000,
    )
    ctx = RuntimeContext(session_id="replay")
    outcome = await workloads.replay(agent, session, ctx, client)
    assert outcome.failures == []
    full = await agent.history(ctx)  # the record, as stored: with secrets redacted
    assert [m.text for m in full[: len(session.messages)]] == [
        redact_message(m).text for m in session.messages
    ]
    points = workloads.request_points(session.messages)
    assert len(inner.agent_requests) == len(points)
    # what the model received at each point is the recording up to there
    for request, point in zip(inner.agent_requests, points, strict=True):
        assert request.state is not None
        assert request.history[-1].text == session.messages[point - 1].text


def test_langchain_conversion_round_trips_unchanged_messages() -> None:
    session = workloads.history(40)
    originals = {m.id: m for m in session.messages}
    back = peers.from_langchain(peers.to_langchain(session.messages), originals)
    assert back == list(session.messages)


# ------------------------------------------------------------------------------ report
def test_stats_and_ratios() -> None:
    s = _report.stats([1.0, 2.0, 3.0, 4.0, 5.0])
    assert s["median"] == 3.0 and s["n"] == 5
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)
    paired = _report.ratio_stats([10.0, 20.0], [1.0, 2.0])
    assert paired["median"] == 10.0 and paired["p10"] == paired["p90"] == 10.0
    assert _report.ratio_stats([], [1.0])["n"] == 0
    assert _report.fmt_ratio(paired) == "10.0× (10.0–10.0)"
    assert _report.fmt_time(0.0015) == "1.50 ms"


def test_report_renders_a_result() -> None:
    ours = to_result(
        {
            "workload": "w",
            "headline": ["h"],
            "goals": [{"goal": "g", "met": False, "detail": "d"}],
            "tables": [{"title": "t", "columns": ["a", "b"], "rows": [[1, 2.5]]}],
        },
        name="x",
        title="X",
        mode="smoke",
    )
    text = _report.render_report([ours], unavailable=["z"], skipped=["old.json: why"])
    assert "| 1 | 2.50 |" in text and "**missed**" in text
    assert "**Workload:** w" in text and "- `x`: h" in text
    assert "`z`: not available" in text and "skipped: old.json: why" in text


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"workload": "w", "goals": {"ratio": 25.0}}, "`$.goals`"),
        ({"workload": "w", "results": [{"k": 1}]}, "unknown field `results`"),
        ({"workload": "w", "goals": [{"goal": "g", "met": "yes"}]}, "`$.goals[0].met`"),
        ({"headline": ["h"]}, "missing required field `workload`"),
        ({"workload": "w", "tables": [{"columns": ["a"], "rows": [[{"k": 1}]]}]}, "rows"),
    ],
)
def test_a_result_of_another_shape_is_refused_with_a_clear_error(
    raw: dict[str, Any], path: str
) -> None:
    with pytest.raises(ResultShapeError, match="benchmark 'y' returned a result") as caught:
        to_result(raw, name="y", title="Y", mode="smoke")
    assert path in str(caught.value)
    with pytest.raises(ResultShapeError, match="returned list, not a dict"):
        to_result([raw], name="y", title="Y", mode="smoke")


def test_the_runner_fails_a_benchmark_that_returns_another_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("benchmarks.bench_odd")
    module.measure = lambda mode, progress: {"workload": "w", "quick": True}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "benchmarks.bench_odd", module)
    monkeypatch.setitem(BENCHMARKS, "odd", ("bench_odd", "a benchmark of the old shape"))
    (tmp_path / "stale.json").write_text('{"name": "stale", "extra": 1}', "utf-8")
    assert main(["odd", "--smoke", "--out", str(tmp_path)]) == 1
    saved = _report.load_result(tmp_path / "odd.json")
    assert saved.status == "failed"
    assert "unknown field `quick`" in saved.error and "'odd'" in saved.error
    assert "failed: ResultShapeError" in capsys.readouterr().out
    report = (tmp_path / "report.md").read_text("utf-8")
    assert "skipped: stale.json is not a benchmark result" in report


# ------------------------------------------------------------------------------ runner
def test_list_and_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    for name in BENCHMARKS:
        assert name in listed
    assert main(["no-such-benchmark"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_a_missing_module_is_reported_not_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(
        BENCHMARKS, "ghost", ("bench_ghost_not_written_yet", "a benchmark still to come")
    )
    assert main(["ghost", "--smoke", "--out", str(tmp_path)]) == 0
    assert "ghost: not available" in capsys.readouterr().out


# --------------------------------------------------------------------------- benchmarks
def test_overhead_smoke_times_every_configuration_like_for_like(tmp_path: Path) -> None:
    result = _run("overhead", tmp_path)
    data = result.data
    assert set(data) >= {"compacting", "same concerns, compacting", "no compaction", "memory_peak"}
    assert "BudgetFit" in data["same concerns, compacting"]["ours does"]
    for config, systems in (
        ("compacting", {"ours", "ours, in its agent", "LangChain"}),
        ("same concerns, compacting", {"ours", "ours, in its agent", "LangChain"}),
        ("no compaction", SYSTEMS_OVERHEAD),
    ):
        block = data[config]
        assert block["ours does"] and block["LangChain does"], "the report says what each does"
        assert set(block) >= systems
        for system in systems:
            for n, entry in block[system].items():
                if n == "flatness":
                    continue
                for phase in ("cold", "warm"):
                    assert entry[phase]["n"] >= 1
                    assert entry[phase]["median"] > 0
                    assert entry[phase]["p10"] <= entry[phase]["median"] <= entry[phase]["p90"]
                if system != "ours":
                    assert entry["warm_ratio_vs_ours"]["median"] > 0
                if system == "LangChain":  # also against our stack inside its agent
                    assert entry["warm_ratio_vs_in_agent"]["median"] > 0
    # our stack driven as hooks prepared what it prepares inside its agent: both get the
    # history and the call's user message, so they send the same histories, whatever the
    # workload (with ../shared or the generated runs of a user's clone)
    for config in data:
        if config != "memory_peak":
            for n, hooks in data[config]["ours"].items():
                if n != "flatness":
                    agent = data[config]["ours, in its agent"][n]
                    for sent in ("sent_cold", "sent_warm"):
                        assert agent[sent] == hooks[sent], (config, n, sent)
    # compacting: both sides summarised the 120-message history down to about the same size
    for config in ("compacting", "same concerns, compacting"):
        ours, langchain = data[config]["ours"]["120"], data[config]["LangChain"]["120"]
        assert ours["sent_cold"] < 40 and langchain["sent_cold"] < 40
    # no compaction: both sides sent the whole history every round
    ours, langchain = (
        data["no compaction"]["ours"]["120"],
        data["no compaction"]["LangChain"]["120"],
    )
    assert ours["sent_warm"] >= 120 and langchain["sent_warm"] >= 120
    assert all(x >= 0 or math.isnan(x) for x in _numbers(data))
    goals = [g.goal for g in result.goals]
    assert any(g.startswith("flat as history grows") for g in goals)
    assert sum("LangChain's warm round" in g for g in goals) == 3  # one per configuration
    for chart in result.charts:
        assert chart.drawn and (tmp_path / chart.file).stat().st_size > 1000
        assert chart.y_unit == "s"
    assert {row[0] for row in result.tables[0].rows} == {c for c in data if c != "memory_peak"}
    memory = result.data["memory_peak"]
    assert memory and all(m["peak_bytes"] > 0 and m["messages"] > 0 for m in memory.values())
    assert "![" in (tmp_path / "report.md").read_text("utf-8")


@pytest.mark.parametrize("source", ["synthetic", "real"])
@pytest.mark.parametrize("n", [120, 300])
async def test_overhead_drives_our_stack_to_the_same_requests_as_hooks_and_in_its_agent(
    tmp_path: Path, source: workloads.Source, n: int
) -> None:
    # Both workloads in every checkout: the smoke run above sees only the one present (the
    # generated runs in a user's clone, where the hook loop once sent one message more).
    if source == "real" and not trajectories.trajectory_files():
        pytest.skip("no ../shared/data/swe-agent-trajectories next to the project")
    session = workloads.history(n, source=source)
    outputs = workloads.tool_results(session)
    for config in bench_overhead.CONFIGS:
        setup = {"compaction": config.compacting, "concerns_only": config.concerns_only}
        hooks = await bench_overhead.measure_ours_as_hooks(
            session, outputs, 2, tmp_path, collect=False, **setup
        )
        agent = await bench_overhead.measure_ours(
            session, outputs, 2, tmp_path, collect=False, **setup
        )
        for sent in ("sent_cold", "sent_warm"):
            assert agent[sent] == hooks[sent], (config.name, sent)
        if config.compacting:
            assert hooks["sent_cold"] < n // 2  # the cold round compacted


def test_tokens_sent_smoke(tmp_path: Path) -> None:
    result = _run("tokens_sent", tmp_path)
    data = dict(result.data)
    compared = data.pop("compared")
    _check_provider_cache(result, data.pop("provider_cache"))
    assert set(data) == {
        "ours",
        "LangChain",
        "LangChain, our trigger",
        "litellm",
        "LangChain, summary reads all",
    }
    assert not data["LangChain, our trigger"].get("variant")  # a goals' peer: equal settings
    assert data["LangChain, summary reads all"]["variant"] is True  # not one of the goals' peers
    points = len(data["LangChain"]["per_request"])
    assert points == len(data["litellm"]["per_request"]) > 0
    assert data["ours"]["requests"] >= points  # an overflow adds a retried request
    for system, tally in data.items():
        assert tally["requests"] == len(tally["per_request"])
        assert tally["agent_tokens"] == sum(tally["per_request"])
        assert tally["total_tokens"] == tally["agent_tokens"] + tally["summary_tokens"]
        assert (tally["summary_tokens"] > 0) == (tally["summary_requests"] > 0)
        assert all(t > 0 for t in tally["per_request"]), system
        assert tally["overflows"] == sum(t > 12_288 for t in tally["per_request"])
    assert data["ours"]["failures"] == []
    assert data["ours"]["summary_requests"] > 0, "the smoke session is long enough to compact"
    assert data["litellm"]["summary_requests"] == 0
    goals = {g.goal: g for g in result.goals}
    assert goals["zero overflows (exact count over the window)"].met == (
        data["ours"]["overflows"] == 0
    )
    for tally in data.values():
        assert tally["big_breaks"] + tally["small_breaks"] < tally["requests"]
        prefix = tally["prefix_per_request"]
        assert len(prefix) == tally["requests"] and prefix[0] == 0
        assert all(0 <= p <= t for p, t in zip(prefix, tally["per_request"], strict=True))
        assert 0 < tally["usd_openai"] < tally["usd_no_cache_openai"], "an append hits the cache"
        assert 0 < tally["usd_anthropic"] < tally["usd_no_cache_anthropic"]
    assert {"tokens_sent_bill.png", "tokens_sent_prefix.png"} <= {c.file for c in result.charts}
    bill_goals = [g for g in result.goals if g.goal.startswith("the lowest")]
    assert len(bill_goals) == 3 and all(isinstance(g.met, bool) for g in bill_goals)
    for tally in data.values():  # every system's requests carry the task, or are counted
        assert 0 <= tally["task_missing"] <= tally["requests"]
    assert data["ours"]["task_missing"] == 0
    _check_breakpoints_and_cost_trigger(result, data, compared)


def _check_breakpoints_and_cost_trigger(
    result: Result, data: dict[str, Any], compared: dict[str, Any]
) -> None:
    """The breakpoint bill and the cost-trigger rows of the smoke run (one window: 12,288)."""
    assert set(compared) == {"12288"}
    runs = compared["12288"]
    cost = ["ours, cost trigger (OpenAI prices)", "ours, cost trigger (Anthropic prices)"]
    assert list(runs) == ["ours", *cost, "LangChain", "LangChain, our trigger", "litellm"]
    # the main window's runs are reused, not run again
    assert runs["ours"]["total_tokens"] == data["ours"]["total_tokens"]
    assert runs["litellm"]["usd_openai"] == data["litellm"]["usd_openai"]
    assert runs["litellm"]["invalid_pairs"] == data["litellm"]["invalid_pairs"]
    for name, tally in runs.items():
        assert "per_request" not in tally  # per-request lists only for the main window
        assert tally["overflows"] == 0, name
        if name.startswith("ours"):  # litellm's trim_messages may split pairs (a peer's result)
            assert tally["invalid_pairs"] == 0, name
        read, write = (
            tally["anthropic_end_mark_read_tokens"],
            tally["anthropic_end_mark_write_tokens"],
        )
        assert read + write + tally["anthropic_end_mark_fresh_tokens"] == tally["total_tokens"]
        assert 0 < tally["usd_anthropic_marked"] < tally["usd_no_cache_anthropic"], name
    for name in ("ours", *cost):
        tally = runs[name]
        assert tally["task_missing"] == 0, name  # every request still carries the current task
        assert tally["anthropic_marks"] == "breakpoints"
        assert tally["usd_anthropic_marked"] == tally["usd_anthropic_breakpoints"]
        # marks make Anthropic's cache serve most of the input: the bill is a fraction
        read = tally["anthropic_breakpoints_read_tokens"]
        assert read > 0.5 * tally["total_tokens"], name
        assert tally["usd_anthropic_breakpoints"] < 0.5 * tally["usd_no_cache_anthropic"]
        assert tally["summary_requests"] > 0, "the smoke session compacts under every trigger"
    assert runs[cost[0]]["priced_as"] == "OpenAI" and runs[cost[1]]["priced_as"] == "Anthropic"
    assert runs["LangChain"]["anthropic_marks"] == "end_mark"
    tables = {t.title: t for t in result.tables}
    marks = tables["The Anthropic bill with cache breakpoints (ours)"]
    assert [r[2] for r in marks.rows[:3]] == [
        "none",
        "one, on the newest message",
        "ours (place_breakpoints)",
    ]
    assert len(marks.rows) == 6  # ours and the Anthropic-priced cost run, three ways each
    trigger = tables['Compaction(trigger="cost") beside the plain trigger and the peers']
    assert [r[1] for r in trigger.rows] == list(runs)
    assert trigger.rows[0][6] == trigger.rows[0][8] == "1.00×"  # ours against itself
    goals = {g.goal: g for g in result.goals}
    assert goals["cache breakpoints lower our Anthropic bill at every window"].met is True
    assert (
        goals["every request of ours carries the current task (every trigger, every window)"].met
        is True
    )
    costs = goals["the cost trigger bills no more than the plain trigger, at its provider's prices"]
    assert isinstance(costs.met, bool) and "OpenAI at 12,288" in costs.detail


def _check_provider_cache(result: Result, reported: dict[str, Any]) -> None:
    """Reported vs computed cached tokens, from the local caching servers (one small session)."""
    styles = reported["styles"]
    assert set(styles) == {"OpenAI-style", "Anthropic-style"}
    for style, t in styles.items():
        assert t["failures"] == [] and t["sessions"] == 1, style
        assert t["requests"] > 0 and t["summary_requests"] > 0, "the small session compacts"
        assert sum(t["verdicts"].values()) == t["requests"]
        assert t["verdicts"].get("agree", 0) > t["requests"] // 2, t["verdicts"]
        assert "None" not in t["verdicts"]  # both servers report cached tokens
        for key in ("reported", "computed"):
            assert 0 < t[f"{key}_cached"] < t[f"{key}_input"], (style, key)
        assert 0 < t["expected_cached"] < t["estimated_input"]
    # OpenAI writes nothing extra; Anthropic writes what its marks cover
    assert styles["OpenAI-style"]["reported_written"] == 0
    assert styles["Anthropic-style"]["reported_written"] > 0
    assert styles["Anthropic-style"]["computed_written"] > 0
    table = next(t for t in result.tables if t.title.startswith("Cached input: reported"))
    assert [r[0] for r in table.rows] == ["OpenAI-style", "Anthropic-style"]
    assert all(str(r[4]).endswith("%") and str(r[6]).endswith("%") for r in table.rows)
    goal = next(g for g in result.goals if g.goal.startswith("the bill rule's cached share"))
    assert isinstance(goal.met, bool) and "OpenAI-style" in goal.detail


def test_tokens_sent_runs_on_the_generated_workload_without_shared_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import bench_tokens_sent

    monkeypatch.setattr(bench_tokens_sent, "SOURCE", "synthetic")
    result = _run("tokens_sent", tmp_path)
    assert result.workload.startswith("synthetic (synthetic)")
    data = result.data
    assert data["ours"]["requests"] > 0 and data["ours"]["task_missing"] == 0
    assert set(data["compared"]["12288"]) >= {"ours", "ours, cost trigger (Anthropic prices)"}
    assert all(t["requests"] > 0 for t in data["provider_cache"]["styles"].values())


def test_marked_cache_reads_the_entry_a_mark_wrote_and_writes_the_rest() -> None:
    from benchmarks.bench_tokens_sent import PrefixMeter, Price, end_marks, marked_bill

    meter = PrefixMeter(tool_tokens=0)
    big = Message.user("fix the failing test in parser.py " + "context " * 1_500)
    state = [Message.user("state 1"), Message.user("state 2"), Message.user("state 3")]
    first = [big, Message.assistant("on it"), state[0]]
    requests = [first, [*first[:2], Message.assistant("next"), state[1]]]
    requests.append([*requests[1][:3], Message.assistant("more"), state[2]])
    for request in requests:  # the JSON form's own size: no scaling
        meter.add(request, sum(len(meter.message_tokens(m)) for m in request), tools=False)
    size = [len(meter.message_tokens(m)) for m in requests[2]]
    price = Price(model="a", input=3.0, cached=0.3, write=3.75)
    # Marks before the state message (as place_breakpoints marks the last history message)
    history = [[len(r) - 2] for r in requests]
    out = marked_bill(meter, history, price, "m")
    first_write = size[0] + size[1]
    assert out["m_read_tokens"] == first_write + (first_write + size[2])
    assert out["m_write_tokens"] == first_write + size[2] + size[3]
    assert out["m_fresh_tokens"] == sum(meter.tokens) - out["m_read_tokens"] - out["m_write_tokens"]
    # A mark on the newest message only: the changing state ends every entry, nothing is read
    ends = marked_bill(meter, end_marks(meter), price, "e")
    assert ends["e_read_tokens"] == 0 and ends["e_write_tokens"] == sum(meter.tokens)
    assert out["usd_m"] < ends["usd_e"]
    # A prefix under 1,024 tokens is never written
    small = PrefixMeter(tool_tokens=0)
    short = [Message.user("hi"), Message.assistant("hello")]
    for _ in range(2):
        small.add(short, sum(len(small.message_tokens(m)) for m in short), tools=False)
    assert marked_bill(small, end_marks(small), price, "s")["s_read_tokens"] == 0


def test_prefix_meter_counts_what_the_previous_request_shares() -> None:
    from benchmarks.bench_tokens_sent import PrefixMeter

    meter = PrefixMeter(tool_tokens=100)
    task, reply = Message.user("fix the failing test in parser.py"), Message.assistant("on it")
    first, second = [task, reply], [task, reply, Message.user("next")]
    third = [task, Message.assistant("on it, now")]
    for request in (first, second, third):  # the JSON form's own size: no scaling
        meter.add(request, 100 + sum(len(meter.message_tokens(m)) for m in request))
    size = [len(meter.message_tokens(m)) for m in (task, reply)]
    assert meter.prefix[0] == meter.whole[0] == 0
    assert meter.prefix[1] == meter.whole[1] == 100 + size[0] + size[1]
    assert meter.whole[2] == 100 + size[0]
    assert meter.whole[2] < meter.prefix[2] < meter.whole[2] + size[1], "a partial message"


def test_cache_breaks_tell_a_re_sent_tail_from_a_rewrite_near_the_front() -> None:
    from benchmarks.bench_tokens_sent import cache_breaks

    # 2nd: a pure append; 3rd: the previous 3,000's last 400 re-sent; 4th: a compaction
    out = cache_breaks([2_000, 3_000, 3_500, 1_500], [0, 2_000, 2_600, 1_200])
    assert out == {
        "not_reused_tokens": 400 + 2_300,
        "big_breaks": 1,
        "big_break_tokens": 2_300,
        "small_breaks": 1,
        "small_break_tokens": 400,
    }


def test_the_bill_applies_each_providers_cache_rule() -> None:
    from benchmarks.bench_tokens_sent import PrefixMeter, Price, bill

    price = {
        "OpenAI": Price(model="o", input=2.0, cached=1.0, write=None),
        "Anthropic": Price(model="a", input=3.0, cached=0.3, write=3.75),
        "OpenAI gpt-5": Price(model="o5", input=1.0, cached=0.1, write=None),
    }
    meter = PrefixMeter(tool_tokens=0)
    # the second request shares 2,000 tokens (1,900 up to a whole message); the third 500;
    # then a summary request of 1,000 tokens that shares nothing, billed by the same rule
    meter.kinds = ["agent", "agent", "agent", "summary"]
    meter.tokens = [2_000, 3_000, 3_500, 1_000]
    meter.prefix = [0, 2_000, 500, 0]
    meter.whole = [0, 1_900, 500, 0]
    out = bill(meter, price)
    assert out["openai_cached_tokens"] == 1_920  # 15 steps of 128; under 1,024 nothing
    assert out["anthropic_cached_tokens"] == 1_900
    assert out["usd_no_cache_openai"] == pytest.approx(9_500 * 2.0)
    assert out["usd_openai"] == pytest.approx((9_500 - 1_920) * 2.0 + 1_920 * 1.0)
    assert out["usd_openai_gpt5"] == pytest.approx((9_500 - 1_920) * 1.0 + 1_920 * 0.1)
    assert out["usd_anthropic"] == pytest.approx((9_500 - 1_900) * 3.0 + 1_900 * 0.3)
    assert out["usd_anthropic_with_writes"] == pytest.approx(
        (8_500 - 1_900) * 3.75 + 1_900 * 0.3 + 1_000 * 3.0
    )
    # A summary request read from the cache is billed at the cached price too.
    meter.tokens[3], meter.prefix[3], meter.whole[3] = 1_500, 1_200, 1_200
    cached = bill(meter, price)
    assert cached["summary_cached_tokens"] == 1_152  # 9 steps of 128
    assert cached["usd_anthropic"] == pytest.approx((10_000 - 3_100) * 3.0 + 3_100 * 0.3)


def test_prefix_meter_finds_the_prefix_in_an_earlier_request_and_keeps_tools_apart() -> None:
    from benchmarks.bench_tokens_sent import PrefixMeter

    meter = PrefixMeter(tool_tokens=100)
    task, reply = Message.user("fix the failing test in parser.py"), Message.assistant("on it")
    size = [len(meter.message_tokens(m)) for m in (task, reply)]
    agent = [task, reply]
    summary = [Message.user("Summarise: fix the failing test")]
    meter.add(agent, 100 + sum(size), kind="agent")
    meter.add(summary, len(meter.message_tokens(summary[0])), kind="summary", tools=False)
    # The next agent request still finds its prefix two requests back (a cache holds several)
    later = [*agent, Message.user("next")]
    meter.add(later, 100 + sum(len(meter.message_tokens(m)) for m in later), kind="agent")
    assert meter.prefix[1] == 0  # no tools: it cannot share the agent request's start
    assert meter.whole[2] == 100 + sum(size)
    tokens, prefix, _ = meter.of("agent")
    assert len(tokens) == 2 and prefix[1] == meter.prefix[2]


def test_tokens_sent_counts_a_broken_tool_pair() -> None:
    from benchmarks.bench_tokens_sent import pair_problems

    call = ScriptedModel.tool_call("bash", {"command": "ls"})
    result = Message.tool(call.tool_calls[0].id, "a.py")
    assert pair_problems([Message.user("go"), call, result]) == 0
    assert pair_problems([Message.user("go"), result]) == 1
    assert pair_problems([Message.user("go"), call]) == 1


def test_load_smoke_checks_isolation(tmp_path: Path) -> None:
    result = _run("load", tmp_path)
    data = result.data
    assert data["isolated"] is True
    run = data["runs"][0]
    assert run["leaks"] == 0 and run["lost"] == 0 and run["failures"] == []
    assert run["rounds"] == run["sessions"] * 3
    assert run["requests_checked"] >= run["rounds"]
    assert run["rounds_per_s"] > 0 and run["rss_per_session"] >= 0
    assert result.goals[0].met is True


async def test_load_isolation_check_catches_a_leak() -> None:
    from benchmarks.bench_load import count_leaks
    from harness.request import ModelRequest, RequestIds

    markers = {"a": "MARK-00000000000a", "b": "MARK-00000000000b"}
    clean = ModelRequest(
        model="m", ids=RequestIds(session_id="a"), history=(Message.user(markers["a"]),)
    )
    leaked = ModelRequest(
        model="m",
        ids=RequestIds(session_id="b"),
        history=(Message.user(f"{markers['b']} and someone else's {markers['a']}"),),
    )
    lost = ModelRequest(model="m", ids=RequestIds(session_id="a"), history=(Message.user("hi"),))
    leaks, missing, examples = count_leaks([clean, leaked, lost], markers)
    assert (leaks, missing) == (1, 1)
    assert examples == ["b saw ['MARK-00000000000a']"]


@pytest.mark.integration
def test_providers_smoke_against_the_local_server(tmp_path: Path) -> None:
    result = _run("providers", tmp_path)
    rows = result.data["rows"]
    assert result.data["local"] is True
    assert len(rows) >= 5
    answered = [r for r in rows if r["error"] is None]
    assert answered and all(r["reported"] > 0 for r in answered)
    for row in answered:
        assert row["error_pct"] == pytest.approx(
            (row["estimate"] - row["reported"]) / row["reported"] * 100
        )
        assert row["latency_s"] > 0
    assert any(r["stack_s"] is not None and r["stack_s"] > 0 for r in rows)
    for row in rows:
        if row["overflow"]:
            assert row["handled"].startswith(("retried", "not retried"))
    assert 0.7 <= result.data["factor"] <= 2.0


def test_providers_refuses_without_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["providers", "--model", "gpt-4o", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY" in err and "not set" in err


@pytest.mark.parametrize("name", ["estimation", "selection", "compaction_cut"])
def test_hot_path_benchmarks_smoke(name: str, tmp_path: Path) -> None:
    result = _run(name, tmp_path)
    assert result.goals, f"{name} states its goals"
    assert all(isinstance(g.met, bool) and g.goal for g in result.goals)
    assert result.tables, f"{name} prints a table"
    numbers = _numbers(result.data)
    assert numbers and all(not math.isnan(x) for x in numbers)


def test_sessions_smoke_reports_both_backends_and_the_goals(tmp_path: Path) -> None:
    result = _run("sessions", tmp_path)
    data = result.data
    backends = ["SQLite file"]
    if not data["postgres"].startswith("not available"):
        backends.append("PostgreSQL")
    else:
        assert "not available" in " ".join(result.headline)
    for name in backends:
        append = data["append"][name]
        assert append["events"] == 2_000 and append["commits"] == 500
        assert append["events_per_s"] > 0 and append["commit_p50_s"] > 0
        queries = data["search"][name]
        languages = {q["language"] for q in queries.values()}
        assert languages == {"English", "CJK"}
        assert all(q["p50_s"] > 0 and q["p95_s"] >= q["p50_s"] for q in queries.values())
        hits = {q["kind"]: q["hits"] for q in queries.values() if q["language"] == "CJK"}
        assert hits["no hit"] == 0 and hits["frequent phrase (4 chars)"] > 0
        assert data["reads"][name]["load_p50_s"] > 0
        long = data["long_working"][name]
        assert 0 < long["commit_p50_s"] <= long["commit_p99_s"]
    rounds = data["rounds"]
    assert set(rounds) == {"no-op store (baseline)", "SQLite in memory", *backends}
    assert all(r["rounds"] > 0 and r["per_round_s"] > 0 for r in rounds.values())
    assert rounds["SQLite file"]["store_per_round_s"] > 0
    assert all(math.isfinite(r["added_per_round_s"]) for r in rounds.values())
    memory = data["memory"]
    assert memory["logged_messages"] >= memory["working_history_messages"] > 0
    assert memory["full_history_messages"] == 0  # by default RAM holds the working history only
    for key in ("working_text_bytes", "session_bytes", "agent_bytes", "resumed_bytes"):
        assert memory[key] > 0
    assert (
        memory["limit_bytes"] == 2 * memory["working_text_bytes"] + 16 * memory["logged_messages"]
    )
    goals = {g.goal: g.met for g in result.goals}
    assert len(goals) == 2 and all(isinstance(met, bool) for met in goals.values())


# ------------------------------------------------------------------------ usability
def test_progress_bar_reports_first_last_and_at_most_every_interval() -> None:
    lines: list[str] = []
    bar = _report.ProgressBar(lines.append, "texts counted", 1_000, every_s=3600)
    for _ in range(1_000):
        bar.step("x")
    assert len(lines) == 2, "the first and the last item, nothing in between within the hour"
    assert lines[0].startswith("[-----") and "1/1,000 texts counted" in lines[0]
    assert "s left" in lines[0] and lines[-1].startswith("[" + "#" * 20 + "]")
    assert "1,000/1,000" in lines[-1] and "left" not in lines[-1]


def test_time_axes_use_the_unit_that_reads_best() -> None:
    assert _report.time_unit([0.0004, 0.0002]) == (1e-3, "ms")
    assert _report.time_unit([2e-5, 8e-5, 3e-4]) == (1e-6, "µs")
    assert _report.time_unit([1.5, 3.0]) == (1.0, "s")
    assert _report.time_unit([]) == (1.0, "s")


def test_the_runner_prints_the_expected_duration() -> None:
    from benchmarks.__main__ import DURATIONS, expected_duration

    assert set(DURATIONS["full"]) >= set(BENCHMARKS) - {
        "fragments",
        "proxy",
        "incremental",
        "burst",
    }
    line = expected_duration(list(BENCHMARKS), "full")
    assert line.startswith("expected duration (full mode") and "min" in line
    assert "overhead ~" in expected_duration(["overhead"], "quick")


def test_the_report_opens_with_a_short_summary(tmp_path: Path) -> None:
    ok = to_result(
        {
            "workload": "w",
            "headline": ["first figure", "second"],
            "goals": [
                {"goal": "g1", "met": True},
                {"goal": "g2", "met": False},
                {"goal": "g3", "met": None},
            ],
        },
        name="x",
        title="X bench",
        mode="quick",
    )
    text = _report.render_report([ok])
    glance = text.split("## At a glance", 1)[1].split("## Machine", 1)[0]
    assert "**X bench** (`x`, quick): 1 of 2 goals met — first figure" in glance
    assert text.index("## At a glance") < text.index("## Machine")


@pytest.mark.integration
def test_a_failed_provider_run_exits_non_zero_and_keeps_the_last_good_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.integration import openai_server as srv

    good = Result(
        name="providers",
        title="Against a provider",
        mode="smoke",
        workload="the earlier, good run",
        headline=["median |error| 0.9%"],
        date="2026-11-30T10:00:00+00:00",
    )
    path = _report.save_json(good, tmp_path)
    before = path.read_bytes()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local-test")
    broken = srv.error(400, {"error": {"message": "model is misconfigured", "type": "invalid"}})
    with srv.OpenAIServer(default=lambda body: broken) as server:
        args = ["--model", "openai/gpt-4o", "--api-base", server.base_url]
        status = main(["providers", "--smoke", *args, "--out", str(tmp_path)])
    assert status == 1
    assert path.read_bytes() == before, "the last good results are not overwritten"
    report = (tmp_path / "report.md").read_text("utf-8")
    assert "the latest run failed" in report and "ProviderRunFailed" in report
    assert "the earlier, good run" in report
    assert "kept the last good results" in capsys.readouterr().err


def test_readme_table_is_generated_from_the_saved_results(tmp_path: Path) -> None:
    from benchmarks import readme_table

    # benchmarks/results/ is not in git: the results are made here, as `make bench` makes them
    results = tmp_path / "results"
    for name in ("selection", "compaction_cut"):
        assert main([name, "--smoke", "--out", str(results)]) == 0
    readme = tmp_path / "README.md"
    original = readme_table.README.read_text("utf-8")
    readme.write_text(original, "utf-8")
    assert main(["--readme", str(readme), "--out", str(results)]) == 0
    text = readme.read_text("utf-8")
    head, rest = text.split(readme_table.BEGIN)
    block, tail = rest.split(readme_table.END)
    assert head == original.split(readme_table.BEGIN)[0], "only the marked block changes"
    assert tail == original.split(readme_table.END)[1], "only the marked block changes"
    saved, _ = _report.load_results(results)
    assert set(saved) == {"selection", "compaction_cut"}
    for result in saved.values():
        assert f"(`{result.name}`)" in block
        assert f"`{result.mode}` mode" in block and result.workload[:60] in block
        for figure in result.readme or result.headline[: readme_table.MAX_HEADLINES]:
            assert figure.replace("|", "\\|") in block
    assert main(["--readme", str(readme), "--out", str(results)]) == 0
    assert readme.read_text("utf-8") == text, "a second run changes nothing"


def test_readme_table_refuses_a_readme_without_markers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import readme_table

    readme = tmp_path / "README.md"
    readme.write_text("# title\n\nno table here\n", "utf-8")
    assert readme_table.main(["--readme", str(readme)]) == 2
    assert readme.read_text("utf-8") == "# title\n\nno table here\n"
    err = capsys.readouterr().err
    assert readme_table.BEGIN in err and "add them" in err
    empty = tmp_path / "none"
    empty.mkdir()
    readme.write_text(f"{readme_table.BEGIN}\n{readme_table.END}\n", "utf-8")
    assert readme_table.main(["--readme", str(readme), "--results", str(empty)]) == 2
    assert "no benchmark results" in capsys.readouterr().err


def test_fragments_smoke_reports_latencies_and_the_editors_cost(tmp_path: Path) -> None:
    result = _run("fragments", tmp_path)
    data = result.data
    backends = ["SQLite file"]
    if not data["postgres"].startswith("not available"):
        backends.append("PostgreSQL")
    else:
        assert "not available" in " ".join(result.headline)
    assert list(data["backends"]) == backends
    hits = {}
    for name in backends:
        measured = data["backends"][name]
        assert measured["listed"] == data["fragments"] + 40  # added + the history's messages
        assert 0 < measured["list"]["p50_s"] <= measured["list"]["p99_s"]
        assert 0 < measured["edit"]["p50_s"] <= measured["edit"]["p99_s"]
        hits[name] = {kind: s["hits"] for kind, s in measured["search"].items()}
        assert hits[name]["word found nowhere"] == 0
        assert all(n > 0 for kind, n in hits[name].items() if kind != "word found nowhere")
    assert all(h == hits["SQLite file"] for h in hits.values())  # the backends agree
    rounds = data["rounds"]
    assert rounds["edited"] == rounds["disabled"] == 5
    assert rounds["sent_messages"]["with"] < rounds["sent_messages"]["without"]
    assert rounds["left_out_transforms"] >= rounds["disabled"]
    assert rounds["ratio"]["n"] > 0 and rounds["ratio"]["median"] > 0
    assert rounds["apply"]["median"] > 0 and rounds["reads"]["median"] > 0


def test_incremental_smoke_reports_warm_rounds_stateless_requests_and_import(
    tmp_path: Path,
) -> None:
    result = _run("incremental", tmp_path)
    assert len(result.goals) == 3
    assert all(isinstance(g.met, bool) and g.detail for g in result.goals)
    data = result.data
    assert "default stack" in data["warm_s"]
    assert all(len(sizes) == 2 for sizes in data["warm_s"].values())
    assert len(data["stateless_s"]) == 2, "far from and near the limit"
    assert set(data["import_ms"]) == {"bare", "packages", "everyday"}
    numbers = _numbers(data)
    assert numbers and all(not math.isnan(x) and x >= 0 for x in numbers)


def test_burst_smoke_reports_the_burst_and_both_compactions(tmp_path: Path) -> None:
    result = _run("burst", tmp_path)
    burst = result.data["burst"]
    for run in ("default", "baseline"):
        figures = burst[run]
        assert 0 < figures["stack_p50"] <= figures["stack_p99"]
        assert figures["call_p99"] >= figures["stack_p99"]  # the call contains the stack
    assert "WorkspaceMaterials" in burst["layers"] and "Compaction" in burst["layers"]
    assert not any(note.startswith("failure") for note in result.notes)
    (cold,) = result.data["cold"]
    ours = cold["ours"][0]
    assert ours["requests"] >= 1 and ours["history_tokens"] > 0
    assert 0 < ours["summary_tokens"] <= 1.1 * ours["history_tokens"]
    # The second compaction updates the summary with what is new, not the whole history again.
    assert ours["second_requests"] >= 1
    assert 0 < ours["second_tokens"] < ours["summary_tokens"]
    assert result.goals[0].met is None  # the 50 ms goal is judged in full mode only
    assert result.goals[1].met is True


def test_our_stack_uses_the_compaction_it_is_given() -> None:
    from benchmarks.peers import our_stack
    from middleware import Compaction

    mine = Compaction(trigger_messages=50, keep_tokens=0, keep_messages=20)
    assert mine in our_stack(compaction=mine)
    assert not any(isinstance(m, Compaction) for m in our_stack(compaction=False))
    assert sum(isinstance(m, Compaction) for m in our_stack()) == 1
