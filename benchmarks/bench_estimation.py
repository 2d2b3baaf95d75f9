"""Token-estimation benchmark: error per text class, in-sample and out-of-sample, and speed.

    python -m benchmarks.bench_estimation [--quick] [--json PATH]

For every tokenizer family it reports, side by side, per workload (real SWE-agent
trajectories and Chinese seeds when ``../shared`` is there, standard-library text, the
generated corpora of `benchmarks.corpus`, and every class of the wide evaluation set of
`benchmarks.textgen`):

- **in-sample**: the shipped coefficients (`harness.tokens.FAMILY_COEFFICIENTS`, fitted on all
  of these) — the summed ratio estimate ÷ exact;
- **out-of-sample**: for real, stdlib and generated corpora, coefficients refitted without the
  workload's corpus family (leave one family out, `benchmarks.fit_estimator.fit_on`); for the
  wide set, the shipped coefficients on texts regenerated with another seed. Summed ratio,
  and per message (framing included) the median and p95 of |error| and the sum error;
- **speed**: the time to count every text of the real (or, without ``../shared``, stdlib)
  workloads with the approximate estimator and with the family's bare exact tokenizer
  (tiktoken ``encode_ordinary``, a ``tokenizers`` ``encode``), interleaved, best of N.

Smoke mode skips the refits (out-of-sample then means the regenerated wide set only).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import _report
from benchmarks._report import Mode, Progress
from benchmarks.corpus import Workload
from benchmarks.fit_estimator import (
    Row,
    corpus_family,
    evaluate,
    fit_on,
    load_data,
    measure_runs,
    workloads_used,
)
from benchmarks.textgen import wide_workloads
from benchmarks.trajectories import SHARED
from harness.tokens import (
    FAMILIES,
    FAMILY_FLOOR,
    ApproximateEstimator,
    approximate,
    exact_for_family,
    litellm_tokenizer_dir,
)

GOALS = {"ratio": 25.0, "median": 7.0, "p95": 20.0, "sum_error": 0.0, "low": 0.9, "high": 2.0}
"""Speed ratio ≥; on real transcripts median and p95 |error| ≤ and sum error ≥ (percent);
per class the summed ratio within [low, high]."""


def bare_tokenizer(family: str) -> tuple[str, Callable[[str], object]]:
    """Return a label and the fastest exact encode call of ``family`` (no wrapper)."""
    exact_for_family(family)  # points tiktoken at litellm's files, offline
    if family in ("o200k", "cl100k"):
        from harness.tokens import tiktoken_encoding

        encoding = tiktoken_encoding(f"{family}_base")
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


def speed(workload: Workload, family: str, rounds: int) -> dict[str, Any]:
    """Return the exact ÷ approximate time ratio of one family on one workload."""
    texts = list(workload.texts())
    label, exact_encode = bare_tokenizer(family)
    exact_time, approx_time = best_times([exact_encode, approximate(family).count], texts, rounds)
    return {
        "workload": workload.name,
        "family": family,
        "exact": label,
        "exact_ms": exact_time * 1e3,
        "approx_ms": approx_time * 1e3,
        "ratio": exact_time / approx_time,
    }


def _row(row: Row) -> dict[str, float]:
    return {"ratio": row.ratio, "median": row.median, "p95": row.p95, "sum_error": row.sum_error}


def measure(mode: Mode, progress: Progress | None = None) -> dict[str, Any]:
    """Run the benchmark and return its results in the suite's shape (see `benchmarks._report`).

    ``quick`` uses fewer texts and rounds; ``smoke`` a handful of texts, one round and no
    refits: it checks the output only.
    """
    smoke, quick = mode == "smoke", mode == "quick"
    say = progress or (lambda line: print(line, file=sys.stderr))
    started = time.perf_counter()
    shared = SHARED.exists()
    with _report.heartbeat(say, "loading the workloads and the exact tokenizers"):
        workloads = workloads_used(quick=quick or smoke, shared=shared)
        if smoke:
            workloads = [
                Workload(w.name, w.source, w.description, w.messages[:4]) for w in workloads
            ]
        count = 3 if smoke else 12 if quick else 24
        unseen = {w.name: w for w in wide_workloads(seed=1, count=count)}
        exact = {f: exact_for_family(f) for f in FAMILIES}
        runs = {f: measure_runs(e) for f, e in exact.items()}
    data = None
    if not smoke:
        texts = sum(len(w.messages) for w in workloads)
        with _report.heartbeat(
            say, f"exact counts and features of {len(workloads)} workloads ({texts:,} messages)"
        ):
            data = load_data(workloads, exact, runs)
    rounds = 1 if smoke else 3 if quick else 7
    timed = [w for w in workloads if w.source == "real"] or [
        w for w in workloads if w.source == "stdlib"
    ]
    rows: list[dict[str, Any]] = []
    speeds: list[dict[str, Any]] = []
    groups = [g for g in (data.groups if data is not None else {}) if g != "wide"]
    bar = _report.ProgressBar(
        say,
        "steps (refits, workload evaluations, timings)",
        len(FAMILIES) * (len(groups) + len(workloads) + 1),
        every_s=5,
    )
    for family in FAMILIES:
        shipped = approximate(family)
        refits: dict[str, ApproximateEstimator] = {}
        if data is not None:
            names = [w.name for w in workloads]
            for group in groups:
                held = data.groups[group]
                rest = [n for n in names if n not in {w.name for w in held}]
                refits[group] = ApproximateEstimator(
                    family, fit_on(data, rest, family, runs[family])
                )
                bar.step(f"{family}: refit without {group}")
        for w in workloads:
            inside = evaluate(w, shipped, exact[family])
            if corpus_family(w) == "wide":  # set by workloads_used, outside Workload's type
                outside: Row | None = evaluate(unseen[w.name], shipped, exact[family])
                protocol = "new seed"
            elif w.source in refits:
                outside = evaluate(w, refits[w.source], exact[family])
                protocol = f"{w.source} left out"
            else:
                outside, protocol = None, "-"
            rows.append(
                {
                    "family": family,
                    "workload": w.name,
                    "source": w.source,
                    "in": _row(inside),
                    "out": _row(outside) if outside else None,
                    "protocol": protocol,
                }
            )
            bar.step(f"{family}: evaluated {w.name}")
        speeds += [speed(w, family, rounds) for w in timed]
        bar.step(f"{family}: speed timed on {len(timed)} workload(s)")
    return _result(rows, speeds, workloads, shared, quick, smoke, rounds, started)


def _result(
    rows: list[dict[str, Any]],
    speeds: list[dict[str, Any]],
    workloads: Sequence[Workload],
    shared: bool,
    quick: bool,
    smoke: bool,
    rounds: int,
    started: float,
) -> dict[str, Any]:
    outside = [r for r in rows if r["out"]]
    classes = [r for r in outside if r["source"] != "real"]
    real = [r for r in outside if r["source"] == "real"]
    low = min(classes, key=lambda r: r["out"]["ratio"]) if classes else None
    high = max(classes, key=lambda r: r["out"]["ratio"]) if classes else None
    in_band = [r for r in classes if GOALS["low"] <= r["out"]["ratio"] <= GOALS["high"]]
    slowest = min(speeds, key=lambda r: r["ratio"])
    o200k_speed = [s for s in speeds if s["family"] == "o200k"]
    o200k_slowest = min(o200k_speed, key=lambda r: r["ratio"])
    real_ok = all(
        r["out"]["median"] <= GOALS["median"]
        and r["out"]["p95"] <= GOALS["p95"]
        and r["out"]["sum_error"] >= GOALS["sum_error"]
        for r in real
    )
    workload_text = (
        f"{len(workloads)} workloads: real "
        + ", ".join(w.name for w in workloads if w.source == "real")
        + " (../shared), stdlib, generated corpora and the wide set"
        if shared
        else f"{len(workloads)} stdlib and generated workloads (no ../shared next to the project)"
    )
    headline = [
        f"o200k approximate vs tiktoken: {o200k_slowest['ratio']:.1f}× faster "
        f"({o200k_slowest['workload']}); slowest family {slowest['ratio']:.1f}× ({slowest['family']})",
        f"{len(in_band)} of {len(classes)} class × family cells within "
        f"{GOALS['low']}–{GOALS['high']}× out-of-sample"
        + (
            f"; lowest {low['out']['ratio']:.2f} ({low['family']}, {low['workload']}), "
            f"highest {high['out']['ratio']:.2f} ({high['family']}, {high['workload']})"
            if low and high
            else ""
        ),
        "floors: " + ", ".join(f"{f} {FAMILY_FLOOR[f]:.2f}" for f in FAMILIES),
    ]
    for r in real:
        headline.append(
            f"{r['family']}/{r['workload']} out-of-sample: median {r['out']['median']:.1f}%, "
            f"p95 {r['out']['p95']:.1f}%, sum {r['out']['sum_error']:+.1f}%"
        )
    return {
        "name": "estimation",
        "title": "Token estimation: approximate vs exact, per text class",
        "mode": "smoke" if smoke else "quick" if quick else "full",
        "workload": workload_text,
        "measured": (
            "summed estimate ÷ exact per workload (in-sample: shipped fit; out-of-sample: "
            "refit without the workload's corpus family, or the wide set regenerated); "
            "per-message |error| with framing; counting time of every text, best of "
            f"{rounds} interleaved rounds"
        ),
        "headline": headline,
        "goals": [
            {
                "goal": f"≥ {GOALS['ratio']:.0f}× tiktoken o200k throughput on real transcripts",
                "met": o200k_slowest["ratio"] >= GOALS["ratio"],
                "detail": f"{o200k_slowest['ratio']:.1f}× ({o200k_slowest['workload']})",
            },
            {
                "goal": f"every class within {GOALS['low']}–{GOALS['high']}× out-of-sample",
                "met": len(in_band) == len(classes) and bool(classes),
                "detail": ", ".join(
                    f"{r['family']}/{r['workload']} {r['out']['ratio']:.2f}"
                    for r in classes
                    if r not in in_band
                )
                or "all cells",
            },
            {
                "goal": "real transcripts out-of-sample: median ≤ 7 %, p95 ≤ 20 %, sum ≥ 0",
                "met": real_ok and bool(real),
                "detail": "; ".join(
                    f"{r['family']}/{r['workload']} {r['out']['median']:.1f}/"
                    f"{r['out']['p95']:.1f}/{r['out']['sum_error']:+.1f}%"
                    for r in real
                )
                or "no real data (../shared absent) or smoke mode",
            },
        ],
        "tables": [
            {
                "title": f"{family}: summed ratio in-sample | out-of-sample, per-message error",
                "columns": [
                    "workload",
                    "in ratio",
                    "out ratio",
                    "out med %",
                    "out p95 %",
                    "out sum %",
                    "protocol",
                ],
                "rows": [
                    [
                        r["workload"],
                        round(r["in"]["ratio"], 2),
                        round(r["out"]["ratio"], 2) if r["out"] else None,
                        round(r["out"]["median"], 1) if r["out"] else None,
                        round(r["out"]["p95"], 1) if r["out"] else None,
                        round(r["out"]["sum_error"], 1) if r["out"] else None,
                        r["protocol"],
                    ]
                    for r in rows
                    if r["family"] == family
                ],
            }
            for family in FAMILIES
        ]
        + [
            {
                "title": "speed: exact ÷ approximate counting time",
                "columns": ["family", "workload", "exact", "exact ms", "approx ms", "ratio"],
                "rows": [
                    [
                        s["family"],
                        s["workload"],
                        s["exact"],
                        round(s["exact_ms"], 2),
                        round(s["approx_ms"], 3),
                        round(s["ratio"], 1),
                    ]
                    for s in speeds
                ],
            }
        ],
        "charts": _charts(rows, speeds),
        "data": {
            "rows": rows,
            "speed": speeds,
            "quick": quick,
            "shared_data": shared,
            "rounds": rounds,
            "targets": GOALS,
            "seconds": time.perf_counter() - started,
        },
    }


def _charts(rows: list[dict[str, Any]], speeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the speed chart and the out-of-sample ratio chart (one bar per family)."""
    timed = list(dict.fromkeys(s["workload"] for s in speeds))
    classes = list(dict.fromkeys(r["workload"] for r in rows if r["out"]))
    by_speed = {(s["family"], s["workload"]): s["ratio"] for s in speeds}
    by_ratio = {(r["family"], r["workload"]): r["out"]["ratio"] for r in rows if r["out"]}
    charts: list[dict[str, Any]] = [
        {
            "file": "estimation_speed.png",
            "title": "Approximate vs exact counting: how many times faster",
            "kind": "bar",
            "y_label": "exact time ÷ approximate time",
            "categories": timed,
            "series": {f: [by_speed.get((f, w)) for w in timed] for f in FAMILIES},
        }
    ]
    if classes:
        charts.append(
            {
                "file": "estimation_ratio.png",
                "title": f"Estimate ÷ exact out-of-sample (goal {GOALS['low']}–{GOALS['high']}×)",
                "kind": "bar",
                "y_label": "summed estimate ÷ exact",
                "categories": classes,
                "series": {f: [by_ratio.get((f, c)) for c in classes] for f in FAMILIES},
            }
        )
    return charts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer texts and rounds")
    parser.add_argument("--smoke", action="store_true", help="a handful of texts, no refits")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    result = measure("smoke" if args.smoke else "quick" if args.quick else "full")
    for line in result["headline"]:
        print(line)
    for table in result["tables"]:
        print(f"\n{table['title']}")
        print("  " + " | ".join(table["columns"]))
        for row in table["rows"]:
            print("  " + " | ".join("-" if v is None else str(v) for v in row))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
