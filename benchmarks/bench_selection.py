"""BudgetFit's selection hot path: fitting 10, 1,000 and 10,000 optional blocks into a budget.

What is timed: one `BudgetFit.fit(request)` call — the whole per-request work of the
middleware: classify the blocks (fixed or optional), count them (warm per-block caches, as
in a running agent where sources return the same revisions round after round), check the
fixed cost and the history minimum, order the optional blocks with the default selection
policy and drop from the front until the rest fits, then build the new request with the
``omitted_for_budget`` transforms and the history budget.

Workloads (synthetic, deterministic, seed 0): a request with a System prompt, three tool
schemas, a short history (user, assistant, user), two required blocks,
one task-state block, and N optional blocks — a mix of memory, knowledge, source and
context categories, priorities from -100 to 100, and texts of 40 to 4,000 characters
(log-uniform). Two budgets:

- ``half``: the optional blocks need about twice the room left, so about half are dropped
  (the sort and the single drop pass both run — the case the goal is about);
- ``all fit``: everything fits (the fast path: no sort at all).

The baseline, measured in the same run, is one bare ``sorted()`` of the same optional
blocks with the default policy's key — the least any priority-ordered selection costs.
Also shown: the *cold* first call (empty token caches) for reference.

Run: ``python -m benchmarks.bench_selection [--quick]`` or ``python -m benchmarks selection``.
"""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from benchmarks._report import Mode, Progress, stats, time_samples
from harness.blocks import ContextBlock
from harness.messages import Message, ToolSchema
from harness.policy import ContextPolicy
from harness.request import ModelRequest, SystemPart
from harness.tokens import approximate, clear_count_caches
from middleware.budget_fit import BudgetFit
from middleware.task_state import render_todos
from middleware.task_state.state import TodoItem

SIZES = (10, 1_000, 10_000)
GOAL_N = 1_000
GOAL_S = 2e-3
_VOCABULARY = (
    "login session token expiry handler request response cache retry budget compaction "
    "summary history block source policy manifest workspace memory knowledge module test "
    "failure build status user agent model window estimate selection priority"
)
_WORDS = tuple(_VOCABULARY.split())
_CATEGORIES = ("memory", "knowledge", "source", "source", "context")


def _text(rng: random.Random) -> str:
    size = int(math.exp(rng.uniform(math.log(40), math.log(4_000))))
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def workload(n: int, *, seed: int = 0) -> tuple[ModelRequest, int, int]:
    """Return a request with ``n`` optional blocks, the fixed cost and the optional total."""
    rng = random.Random(seed)
    est = approximate()
    policy = ContextPolicy(estimator=est)
    optional = [
        ContextBlock(
            kind=rng.choice(("runtime", "reference")),
            id=f"b{i}",
            text=_text(rng),
            priority=rng.randint(-100, 100),
            category=rng.choice(_CATEGORIES),
            source_id=f"source/bench/b{i}",
        )
        for i in range(n)
    ]
    fixed_blocks = [
        ContextBlock.runtime("policy", "Refunds need a manager's approval.", required=True),
        ContextBlock.reference("contract", _text(rng), required=True),
        ContextBlock.runtime(
            "todos",
            render_todos([TodoItem(content="fix the login bug", status="in_progress")]),
            category="task",
            placement="TASK_STATE",
        ),
    ]
    blocks = optional[: n // 2] + fixed_blocks + optional[n // 2 :]
    history = (
        Message.user("The login fails after the session expires; fix it and run the tests."),
        Message.assistant("I will look at the session handler first."),
        Message.user("Go on."),
    )
    tools = tuple(
        ToolSchema(
            name=name,
            description=f"{name} a file in the workspace",
            parameters={"type": "object", "properties": {"path": {"type": "string"}}},
        )
        for name in ("read_file", "write_file", "todo_write")
    )
    request = ModelRequest(
        model="bench",
        system=(SystemPart(name="prompt", text="You are a careful coding assistant."),),
        history=history,
        blocks=tuple(blocks),
        tools=tools,
        policy=policy,
        input_limit=10**9,
    )
    fitted = BudgetFit().fit(request)  # also warms the per-block caches
    assert fitted.history_budget is not None
    optional_total = sum(est.count_block(b) for b in optional)
    fixed = 10**9 - fitted.history_budget - optional_total
    return request, fixed, optional_total


def _fmt(s: dict[str, float]) -> str:
    m, lo, hi = s["median"], s["p10"], s["p90"]
    if m >= 1e-3:
        return f"{m * 1e3:,.2f} ms ({lo * 1e3:,.2f}–{hi * 1e3:,.2f})"
    return f"{m * 1e6:,.1f} µs ({lo * 1e6:,.1f}–{hi * 1e6:,.1f})"


def _bare_sort(request: ModelRequest) -> Callable[[], Any]:
    optional = [b for b in request.blocks if not b.required and b.category != "task"]
    first = frozenset(("memory", "knowledge"))

    def sort() -> Any:
        return sorted(
            [
                (0 if b.category in first else 1, b.priority, -len(b.text), -i)
                for i, b in enumerate(optional)
            ]
        )

    return sort


def measure(mode: Mode, progress: Progress | None = None) -> dict[str, Any]:
    """Time `BudgetFit.fit` with 10, 1,000 and 10,000 optional blocks; print a table.

    ``quick`` takes fewer, shorter repeats (a few seconds in all); ``smoke`` the fewest,
    only to check that the benchmark runs.
    """
    smoke, quick = mode == "smoke", mode == "quick"
    repeat = 3 if smoke else 7 if quick else 25
    budget_s = 0.01 if smoke else 0.1 if quick else 0.6
    budget = BudgetFit()
    rows: list[list[Any]] = []
    series: dict[str, list[list[float]]] = {}
    data: dict[str, Any] = {}
    for n in SIZES:
        request, fixed, optional_total = workload(n)
        history = request.estimator.count_messages(request.history)
        for name, room in (("half", optional_total // 2), ("all fit", optional_total + 10)):
            limited = request.replace(input_limit=fixed + history + room)
            clear_count_caches()  # counts are shared process-wide: start this one cold
            cold_request = limited.replace(policy=ContextPolicy(estimator=approximate()))
            started = time.perf_counter()
            budget.fit(cold_request)
            cold = time.perf_counter() - started
            fitted = budget.fit(limited)
            dropped = len(fitted.transforms)
            ours = stats(
                time_samples(partial(budget.fit, limited), repeat=repeat, budget_s=budget_s)
            )
            base = stats(time_samples(_bare_sort(limited), repeat=repeat, budget_s=budget_s))
            rows.append(
                [
                    f"{n:,}",
                    name,
                    f"{dropped:,}",
                    _fmt(ours),
                    f"{ours['median'] / n * 1e6:.2f} µs",
                    _fmt(base),
                    f"{ours['median'] / base['median']:.1f}×",
                    f"{cold * 1e3:,.2f} ms",
                ]
            )
            series.setdefault(f"BudgetFit.fit, {name}", []).append([n, ours["median"] * 1e3])
            if name == "half":
                series.setdefault("bare sort (baseline)", []).append([n, base["median"] * 1e3])
            data[f"{n}:{name}"] = {
                "fit": ours,
                "bare_sort": base,
                "dropped": dropped,
                "cold_s": cold,
            }

    at_goal = data[f"{GOAL_N}:half"]["fit"]["median"]
    growth = data["10000:half"]["fit"]["median"] / data["1000:half"]["fit"]["median"]
    sort_growth = (
        data["10000:half"]["bare_sort"]["median"] / data["1000:half"]["bare_sort"]["median"]
    )
    relative = growth / sort_growth
    columns = [
        "optional blocks",
        "budget",
        "dropped",
        "BudgetFit.fit (median, p10–p90)",
        "per block",
        "bare sort (baseline)",
        "fit / sort",
        "cold first call",
    ]
    result = {
        "name": "selection",
        "title": "BudgetFit: selecting optional blocks under a budget",
        "mode": mode,
        "workload": "synthetic request (seed 0): System prompt, 3 tool schemas, 3-message "
        "history, 2 required + 1 task-state block, and N optional blocks of mixed categories, "
        "priorities −100…100 and 40–4,000 characters; budgets where about half of the optional "
        "tokens fit ('half') or all of them fit ('all fit')",
        "measured": "one BudgetFit.fit(request) call (classification, warm cached counts, fixed "
        "cost and history-minimum checks, one sort, one drop pass, the new request with its "
        "transforms); baseline: one bare sorted() of the optional blocks by the same key",
        "headline": [
            f"{GOAL_N:,} optional blocks, about half dropped: {at_goal * 1e3:.3f} ms per "
            "preparation",
            f"10,000 vs 1,000 blocks: {growth:.1f}× the time; the bare sort: {sort_growth:.1f}×",
        ],
        "goals": [
            {
                "goal": f"≤ 2 ms per preparation at {GOAL_N:,} optional blocks",
                "met": at_goal <= GOAL_S,
                "detail": f"median {at_goal * 1e3:.3f} ms ('half' budget, warm caches)",
            },
            {
                "goal": "n log n: from 1,000 to 10,000 blocks the time grows like a bare sort's",
                "met": relative < 2,
                "detail": f"t(10,000) / t(1,000) = {growth:.1f} for BudgetFit, "
                f"{sort_growth:.1f} for the bare sort (n log n ≈ 13, quadratic ≈ 100)",
            },
        ],
        "tables": [{"title": "BudgetFit.fit per preparation", "columns": columns, "rows": rows}],
        "charts": [
            {
                "file": "selection.png",
                "title": "BudgetFit selection time",
                "x_label": "optional blocks",
                "y_label": "ms per preparation",
                "xlog": True,
                "ylog": True,
                "series": series,
            }
        ],
        "data": data,
    }
    _print(result)
    return result


def _print(result: dict[str, Any]) -> None:
    print(f"{result['title']} — workload: {result['workload']}", file=sys.stderr)
    table = result["tables"][0]
    widths = [
        max(len(str(c)), *(len(str(r[i])) for r in table["rows"]))
        for i, c in enumerate(table["columns"])
    ]
    line = "  ".join(str(c).ljust(w) for c, w in zip(table["columns"], widths, strict=True))
    print(line, file=sys.stderr)
    for row in table["rows"]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)), file=sys.stderr)
    for goal in result["goals"]:
        mark = "met" if goal["met"] else "MISSED"
        print(f"goal: {goal['goal']} — {mark} ({goal['detail']})", file=sys.stderr)


if __name__ == "__main__":
    measure("quick" if "--quick" in sys.argv else "full")
