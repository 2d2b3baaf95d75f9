"""Token-estimation benchmark: speed and error of `approximate()` against exact tokenizers.

    python -m benchmarks.bench_estimation [--quick] [--json PATH]

For every workload (real SWE-agent trajectories and Chinese seeds when ``../shared`` is
there, standard-library text, each synthetic kind — see `benchmarks.corpus`) and every
tokenizer family it reports, in one run:

- throughput: the time to count every text of the workload with ``approximate(family)``
  and with the family's bare exact tokenizer (tiktoken ``encode_ordinary``, or a
  ``tokenizers`` ``encode``), interleaved and best-of-N so that load on the machine hits
  both alike; the ratio is exact time / approximate time;
- error per message, framing included (`count_message` of both estimators): median and
  95th percentile of |approx − exact| / exact;
- sum error: (Σ approx − Σ exact) / Σ exact over the workload (negative = under-count).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.corpus import SHARED, Workload, all_workloads
from benchmarks.fit_estimator import FAMILIES, message_errors
from harness.tokens import approximate, exact_for_family, litellm_tokenizer_dir

GOALS = {"ratio": 25.0, "median": 7.0, "p95": 20.0, "sum_error": -3.0}
"""The targets: throughput ratio ≥, median and p95 error ≤, sum error ≥ (percent)."""


def bare_tokenizer(family: str) -> tuple[str, Callable[[str], object]]:
    """Return a label and the fastest exact encode call of ``family`` (no wrapper)."""
    exact_for_family(family)  # points tiktoken at litellm's files, offline
    if family in ("o200k", "cl100k"):
        import tiktoken

        encoding = tiktoken.get_encoding(f"{family}_base")
        return f"tiktoken {family}_base encode_ordinary", encoding.encode_ordinary
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(litellm_tokenizer_dir() / f"{family}_tokenizer.json"))
    return f"tokenizers {family}", lambda text: tokenizer.encode(text, add_special_tokens=False)


def best_times(
    functions: Sequence[Callable[[str], object]], texts: Sequence[str], rounds: int
) -> list[float]:
    """Return the best wall time of each function over ``texts``, rounds interleaved."""
    best = [float("inf")] * len(functions)
    for _ in range(rounds):
        for i, function in enumerate(functions):
            started = time.perf_counter()
            for text in texts:
                function(text)
            best[i] = min(best[i], time.perf_counter() - started)
    return best


def measure(workload: Workload, family: str, rounds: int) -> dict[str, Any]:
    """Return speed and error figures of one family on one workload."""
    texts = list(workload.texts())
    label, exact_encode = bare_tokenizer(family)
    approx = approximate(family)
    exact_time, approx_time = best_times([exact_encode, approx.count], texts, rounds)
    errors = message_errors(workload, approximate(family), exact_for_family(family))
    return {
        "workload": workload.name,
        "family": family,
        "exact": label,
        "texts": len(texts),
        "exact_us_per_text": exact_time / len(texts) * 1e6,
        "approx_us_per_text": approx_time / len(texts) * 1e6,
        "ratio": exact_time / approx_time,
        "median": errors.median,
        "p95": errors.p95,
        "sum_error": errors.sum_error,
    }


def meets(row: dict[str, Any]) -> bool:
    """Return whether one result row meets every goal."""
    return bool(
        row["ratio"] >= GOALS["ratio"]
        and row["median"] <= GOALS["median"]
        and row["p95"] <= GOALS["p95"]
        and row["sum_error"] >= GOALS["sum_error"]
    )


def run(quick: bool = False, *, smoke: bool = False) -> dict[str, Any]:
    """Run the benchmark and return its results in the suite's shape (see `benchmarks._report`).

    Args:
        quick: fewer messages and rounds (about 20 s).
        smoke: a handful of messages and one round, to check the output only.
    """
    started = time.perf_counter()
    workloads = all_workloads(quick=quick or smoke, count=12 if smoke else None)
    rounds = 1 if smoke else 2 if quick else 7
    rows = [measure(w, family, rounds) for family in FAMILIES for w in workloads]
    real = [w.name for w in workloads if w.source == "real"]
    missed = [r for r in rows if not meets(r)]
    worst_sum = min(rows, key=lambda r: r["sum_error"])
    slowest = min(rows, key=lambda r: r["ratio"])
    return {
        "quick": quick,
        "shared_data": SHARED.exists(),
        "rounds": rounds,
        "targets": GOALS,
        "workload": (
            f"{len(workloads)} corpora: real {', '.join(real)} (from ../shared) plus stdlib and "
            "synthetic generality corpora"
            if real
            else f"{len(workloads)} stdlib and synthetic corpora (no ../shared next to the project)"
        ),
        "headline": [
            f"slowest approximate/exact throughput: {slowest['ratio']:.1f}× "
            f"({slowest['family']}, {slowest['workload']})",
            f"worst corpus-sum error: {worst_sum['sum_error']:+.1f}% "
            f"({worst_sum['family']}, {worst_sum['workload']})",
            f"{len(rows) - len(missed)} of {len(rows)} corpus × family cells meet every goal",
        ],
        "goals": [
            {
                "goal": f"≥ {GOALS['ratio']:.0f}× tiktoken/tokenizers throughput on every corpus",
                "met": all(r["ratio"] >= GOALS["ratio"] for r in rows),
                "detail": f"lowest {slowest['ratio']:.1f}× ({slowest['family']}, {slowest['workload']})",
            },
            {
                "goal": f"median ≤ {GOALS['median']:.0f}% and p95 ≤ {GOALS['p95']:.0f}% per message",
                "met": all(
                    r["median"] <= GOALS["median"] and r["p95"] <= GOALS["p95"] for r in rows
                ),
                "detail": ", ".join(
                    f"{r['family']}/{r['workload']} {r['median']:.1f}/{r['p95']:.1f}%"
                    for r in rows
                    if r["median"] > GOALS["median"] or r["p95"] > GOALS["p95"]
                )
                or "all cells",
            },
            {
                "goal": f"corpus sums never under-count by more than {-GOALS['sum_error']:.0f}%",
                "met": worst_sum["sum_error"] >= GOALS["sum_error"],
                "detail": f"worst {worst_sum['sum_error']:+.1f}% ({worst_sum['family']}, {worst_sum['workload']})",
            },
        ],
        "tables": [
            {
                "title": "approximate vs exact, per corpus and family",
                "columns": ["family", "workload", "ratio", "median %", "p95 %", "sum %", "goals"],
                "rows": [
                    [
                        r["family"],
                        r["workload"],
                        round(r["ratio"], 1),
                        round(r["median"], 1),
                        round(r["p95"], 1),
                        round(r["sum_error"], 1),
                        "ok" if meets(r) else "missed",
                    ]
                    for r in rows
                ],
            }
        ],
        "workloads": [
            {
                "name": w.name,
                "source": w.source,
                "description": w.description,
                "messages": len(w.messages),
                "chars": w.chars,
            }
            for w in workloads
        ],
        "data": {"results": rows},
        "results": rows,
        "seconds": time.perf_counter() - started,
    }


def format_table(result: dict[str, Any]) -> str:
    """Return the printable report of a `run` result."""
    lines = ["workloads:"]
    for w in result["workloads"]:
        lines.append(
            f"  {w['name']:24s} {w['source']:9s} {w['messages']:5d} msgs "
            f"{w['chars']:>10,d} chars  {w['description']}"
        )
    if not result["shared_data"]:
        lines.append("  (no ../shared next to the project: real workloads skipped)")
    goals = result["targets"]
    lines.append(
        f"\ngoals: ratio ≥ {goals['ratio']:.0f}×, median ≤ {goals['median']:.0f}%, "
        f"p95 ≤ {goals['p95']:.0f}%, sum ≥ {goals['sum_error']:+.0f}%   "
        f"(best of {result['rounds']} interleaved rounds; errors per message, framing included)"
    )
    for family in FAMILIES:
        rows = [r for r in result["results"] if r["family"] == family]
        if not rows:
            continue
        lines.append(f"\n{family}  (exact: {rows[0]['exact']})")
        lines.append(
            f"  {'workload':24s} {'exact µs':>9s} {'approx µs':>9s} {'ratio':>7s} "
            f"{'median%':>8s} {'p95%':>6s} {'sum%':>7s}  goals"
        )
        for r in rows:
            lines.append(
                f"  {r['workload']:24s} {r['exact_us_per_text']:9.1f} "
                f"{r['approx_us_per_text']:9.2f} {r['ratio']:6.1f}× {r['median']:8.1f} "
                f"{r['p95']:6.1f} {r['sum_error']:+7.1f}  {'ok' if meets(r) else 'MISSED'}"
            )
    lines.append(f"\n{result['seconds']:.1f} s")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages and rounds (~20 s)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    result = run(args.quick)
    print(format_table(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
