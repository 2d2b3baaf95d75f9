"""Run the benchmark suite: ``python -m benchmarks [NAME ...] [--quick | --smoke] [--list]``.

With no name every benchmark runs, in the order below; ``make bench`` does that. Each one
writes ``<name>.json`` (and its PNG charts) to ``benchmarks/results/`` (``--out`` to change
it), and ``report.md`` there is rebuilt from every result in the folder, with the machine,
the package versions and the date. The summary is printed to stdout, progress to stderr.

``--quick`` keeps each benchmark short; ``--smoke`` is smaller still (the test suite uses
it). How long a run is expected to take (`DURATIONS`, measured) is printed when it starts.
A benchmark that fails keeps its last good result: its JSON is not overwritten, the report
says the figures are from the earlier run, and the exit status is 1. ``--readme`` rewrites
the README's headline table from the saved results (`benchmarks.readme_table`). ``providers`` takes ``--model`` and ``--api-base``; without ``--model`` (or
with ``--model local``) it runs against the local OpenAI-compatible test server.

A benchmark is a module ``benchmarks/bench_<name>.py`` with ``measure(mode, progress)``
(plain or async; `benchmarks._report.run_measure` runs it) that returns a dict of the shape of
`benchmarks.result.Result`; for providers it also takes ``model`` and ``api_base``. A module
that is missing from the checkout is reported as not available; one that fails, or returns a
result of another shape, is reported with its error and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks import _report, readme_table
from benchmarks.result import Result, ResultShapeError

BENCHMARKS: dict[str, tuple[str, str]] = {
    "estimation": (
        "bench_estimation",
        "token estimators: throughput and error against exact counts",
    ),
    "overhead": (
        "bench_overhead",
        "per-round preparation time vs LangChain and litellm, cold and warm",
    ),
    "cold": (
        "bench_cold",
        "first and second call over 2,000 and 10,000 messages, fresh and warm process",
    ),
    "tokens_sent": ("bench_tokens_sent", "input tokens sent and overflows over a replayed session"),
    "fidelity": (
        "bench_fidelity",
        "bill against availability of what the next action needs, per strategy and window",
    ),
    "selection": ("bench_selection", "BudgetFit selection hot path, 10 to 10,000 candidates"),
    "compaction_cut": ("bench_compaction_cut", "the compaction cut, 10 to 10,000 messages"),
    "incremental": (
        "bench_incremental",
        "warm rounds without compaction 100 to 10,000 messages, stateless requests, import time",
    ),
    "load": ("bench_load", "concurrent sessions: rounds/s, preparation p50/p99, RSS, isolation"),
    "sessions": (
        "bench_sessions",
        "session store: append events/s, search p50/p95, per-round cost, memory",
    ),
    "fragments": (
        "bench_fragments",
        "context fragments: list/search/edit at 10,000, FragmentEditor's cost per round",
    ),
    "burst": (
        "bench_burst",
        "1,000 sessions starting at once (first-round p50/p99); cold compaction's summary requests",
    ),
    "providers": (
        "bench_providers",
        "a replayed session against a provider: estimate error, latency",
    ),
    "proxy": (
        "bench_proxy",
        "the litellm proxy hook at 1, 8 and 32 clients: p50/p99 and throughput vs the proxy alone",
    ),
}
"""Name → (module in ``benchmarks``, one-line description), in run order."""

DURATIONS: dict[str, dict[str, float]] = {
    "full": {
        "estimation": 260,
        "overhead": 600,
        "cold": 400,
        "tokens_sent": 930,
        "fidelity": 240,
        "selection": 30,
        "compaction_cut": 20,
        "load": 60,
        "sessions": 150,
        "burst": 90,
        "providers": 30,
        "proxy": 750,
    },
    "quick": {
        "estimation": 200,
        "overhead": 120,
        "cold": 150,
        "tokens_sent": 120,
        "fidelity": 60,
        "selection": 5,
        "compaction_cut": 5,
        "load": 5,
        "sessions": 70,
        "burst": 35,
        "providers": 5,
        "proxy": 360,
    },
}
"""Wall-clock seconds per benchmark and mode, measured on the project's 2-core machine while
it was shared with other work (quick: one ``--quick`` run of the suite, 14 min in all with the
imports; full: overhead (1,081 s under heavy load, 147 s of CPU) and tokens_sent (933 s, 679 s
of CPU) measured, estimation from the last full run (261 s), the others estimated). The runner
prints the sum when it starts; on idle cores a run takes less (each result records its wall
and CPU time)."""


class BenchmarkUnavailable(Exception):
    """Raised when a benchmark's module is not in this checkout."""


class BenchmarkRefused(Exception):
    """Raised by a benchmark that cannot run as asked (a missing API key …); exit status 2."""


def load(name: str) -> Any:
    """Import a benchmark's module.

    Raises:
        BenchmarkUnavailable: when the module does not exist.
    """
    module_name = f"benchmarks.{BENCHMARKS[name][0]}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise BenchmarkUnavailable(name) from exc
        raise


def run_one(name: str, *, mode: _report.Mode, out: Path, options: dict[str, Any]) -> Result:
    """Run one benchmark and save its JSON and charts; a failure becomes a result too.

    A result of the wrong shape (`benchmarks.result.ResultShapeError`) is a failure like any
    other: the error names the benchmark and the offending key.

    Raises:
        BenchmarkUnavailable: when its module is missing.
        BenchmarkRefused: when it refuses to run (passed on from the benchmark).
    """
    module = load(name)
    title = BENCHMARKS[name][1]
    say = _report.progress_printer(name)
    say(f"start ({mode})")
    started = time.perf_counter()
    cpu_started = time.process_time()
    try:
        result = _report.run_measure(module.measure, mode, say, name=name, title=title, **options)
    except Exception as exc:
        if type(exc).__name__ in ("ProviderKeyMissing", "BenchmarkRefused"):
            raise BenchmarkRefused(str(exc)) from exc
        traceback.print_exc(file=sys.stderr)
        result = Result(
            name=name,
            title=title,
            mode=mode,
            workload="",
            status="failed",
            error=f"{type(exc).__name__}: {exc}",
        )
    result.date = _report.now()
    result.elapsed_s = round(time.perf_counter() - started, 2)
    result.cpu_s = round(time.process_time() - cpu_started, 2)
    try:
        drawn = _report.draw_charts(result, out)
    except Exception as exc:  # a broken chart must not lose the figures
        drawn = []
        result.notes.append(f"charts failed: {type(exc).__name__}: {exc}")
    for chart in result.charts:
        chart.drawn = chart.file in drawn
    kept = _last_good(out, name) if result.status != "ok" else None
    if kept is None:
        _report.save_json(result, out)
        say(f"done in {result.elapsed_s:.1f} s")
    else:
        say(
            f"failed after {result.elapsed_s:.1f} s; kept the last good results "
            f"({kept.mode} run of {kept.date or 'unknown date'}) in {out / (name + '.json')}"
        )
    return result


def _last_good(out: Path, name: str) -> Result | None:
    """Return the saved result of ``name`` in ``out`` if it is a good one (else None)."""
    path = out / f"{name}.json"
    if not path.exists():
        return None
    try:
        saved = _report.load_result(path)
    except ResultShapeError:
        return None
    return saved if saved.status == "ok" else None


def expected_duration(names: Sequence[str], mode: _report.Mode) -> str:
    """Return how long running ``names`` in ``mode`` is expected to take, as a sentence."""
    if mode == "smoke":
        return "smoke mode: a few seconds per benchmark"
    known = DURATIONS[mode]
    seconds = sum(known.get(n, 60) for n in names)
    each = ", ".join(f"{n} ~{known.get(n, 60) / 60:.1f} min" for n in names)
    return (
        f"expected duration ({mode} mode, as measured on a shared 2-core machine): about "
        f"{seconds / 60:.0f} min ({each})"
    )


def write_report(out: Path, unavailable: Sequence[str], failed: Sequence[Result] = ()) -> Path:
    """Rebuild ``report.md`` in ``out`` from every saved result, in suite order.

    ``failed`` are this run's failures whose last good result was kept; the report says so.
    """
    saved, skipped = _report.load_results(out)
    ordered = [saved[n] for n in BENCHMARKS if n in saved]
    ordered += [r for n, r in saved.items() if n not in BENCHMARKS]
    path = out / "report.md"
    text = _report.render_report(ordered, unavailable=unavailable, skipped=skipped, failed=failed)
    path.write_text(text, "utf-8")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="context-harness benchmark suite"
    )
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all); see --list")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="short runs (under a minute each)")
    size.add_argument("--smoke", action="store_true", help="tiny runs that only check the output")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--out", type=Path, default=_report.RESULTS_DIR, help="results folder")
    parser.add_argument(
        "--model", default=None, help="providers: a litellm model name ('local': the test server)"
    )
    parser.add_argument("--api-base", default=None, help="providers: the provider's base URL")
    parser.add_argument(
        "--readme",
        nargs="?",
        type=Path,
        const=readme_table.README,
        default=None,
        metavar="PATH",
        help="rewrite the README's benchmark table from the saved results (default README.md) "
        "and exit",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks named in ``argv``; return the exit status."""
    args = _parser().parse_args(argv)
    if args.list:
        for name, (module, description) in BENCHMARKS.items():
            try:
                load(name)
                state = ""
            except BenchmarkUnavailable:
                state = "  (not available)"
            except ImportError as exc:
                state = f"  (cannot import: {exc})"
            print(f"{name:16s} {description}{state}   [{module}]")
        return 0
    if args.readme is not None:
        return readme_table.main(["--readme", str(args.readme), "--results", str(args.out)])
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}",
            file=sys.stderr,
        )
        return 2
    names = args.names or list(BENCHMARKS)
    mode: _report.Mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    options = {"model": args.model, "api_base": args.api_base}
    out: Path = args.out
    unavailable: list[str] = []
    results: list[Result] = []
    failed: list[Result] = []
    status = 0
    print(expected_duration(names, mode), file=sys.stderr, flush=True)
    for name in names:
        try:
            result = run_one(name, mode=mode, out=out, options=options)
        except BenchmarkUnavailable:
            unavailable.append(name)
            print(f"== {name}: not available (benchmarks/{BENCHMARKS[name][0]}.py is missing) ==")
            continue
        except BenchmarkRefused as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = 2
            continue
        results.append(result)
        if result.status != "ok":
            status = max(status, 1)
            failed.append(result)
        print("\n".join(_report.summary_lines(result)), flush=True)
    if results:
        report = write_report(out, unavailable, failed)
        print(f"\nreport: {report}")
    return status


if __name__ == "__main__":
    sys.exit(main())
