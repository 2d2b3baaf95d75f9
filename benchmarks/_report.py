"""Statistics, the Markdown report and the PNG charts of the benchmark suite.

A benchmark's ``run`` returns a plain, JSON-serialisable dict. The suite's own benchmarks
use this shape (every key optional except ``name``); other shapes are rendered generically
(scalars as a list, lists of dicts and dicts of dicts as tables, the rest as JSON):

``name``, ``title``, ``mode`` (``full``/``quick``/``smoke``), ``workload`` (which workload
was used — always said), ``measured`` (what exactly was timed or counted), ``headline``
(summary lines), ``goals`` (``{"goal", "met": bool | None, "detail"}``), ``tables``
(``{"title", "columns", "rows", "note"}``), ``charts`` (``{"file", "title", "x_label",
"y_label", "xlog", "ylog", "series": {label: [[x, y], …]}}`` or a bar chart with
``"kind": "bar", "categories": […], "series": {label: [values]}``), ``notes`` and ``data``
(raw figures, kept in the JSON file only).

Every speed figure is a ratio against a baseline measured in the same run, given with the
median and the spread (p10–p90) of repeated runs; absolute times are printed for reference
and never asserted.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.metadata
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio

Mode = Literal["full", "quick", "smoke"]
"""How long a benchmark runs: ``full`` (``make bench``), ``quick`` (under a minute) or ``smoke``
(only checks the output; the test suite uses it)."""
Progress = Callable[[str], None]
"""Receives a line of progress now and then."""

RESULTS_DIR = Path(__file__).resolve().parent / "results"
PACKAGES = (
    "context-harness",
    "msgspec",
    "anyio",
    "tiktoken",
    "tokenizers",
    "litellm",
    "langchain",
    "langchain-core",
    "langgraph",
    "matplotlib",
    "psutil",
)


# ---------------------------------------------------------------------------- running
def run_measure(
    measure: Callable[..., Any], mode: Mode, progress: Progress | None = None, **options: Any
) -> Any:
    """Run a benchmark's ``measure(mode, progress, **options)`` and return its result.

    An async ``measure`` runs in a fresh event loop. Only the options its signature names are
    passed, and never one that is ``None`` (``--model`` goes to ``providers`` alone).
    """
    params = inspect.signature(measure).parameters
    kwargs = {k: v for k, v in options.items() if v is not None and k in params}
    call = functools.partial(measure, mode, progress or _quiet, **kwargs)
    if inspect.iscoroutinefunction(measure):
        return anyio.run(call)
    return call()


def _quiet(message: str) -> None:
    """Drop a progress line."""


# ----------------------------------------------------------------------------- stats
def percentile(samples: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0–100) of ``samples`` by linear interpolation."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def stats(samples: Sequence[float]) -> dict[str, float]:
    """Return the median, p10, p90, mean and count of ``samples``."""
    if not samples:
        return {"median": math.nan, "p10": math.nan, "p90": math.nan, "mean": math.nan, "n": 0}
    return {
        "median": float(statistics.median(samples)),
        "p10": percentile(samples, 10),
        "p90": percentile(samples, 90),
        "mean": float(statistics.fmean(samples)),
        "n": len(samples),
    }


def time_samples(fn: Callable[[], Any], *, repeat: int, budget_s: float) -> list[float]:
    """Return ``repeat`` samples of the time of one call of ``fn``, each averaged over a batch.

    The batch size is chosen from one warm-up call so that all samples together take about
    ``budget_s`` seconds (at most 10,000 calls per sample).
    """
    started = time.perf_counter()
    fn()
    one = max(time.perf_counter() - started, 1e-7)
    batch = max(1, min(10_000, int(budget_s / repeat / one)))
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - started) / batch)
    return samples


def ratio_stats(numerator: Sequence[float], denominator: Sequence[float]) -> dict[str, float]:
    """Return the distribution of ``numerator / denominator`` over repeated runs.

    Paired runs (same length) give one ratio per pair; otherwise every combination is used
    (at most 10,000), which spreads the ratio by the noise of both sides.
    """
    nums = [x for x in numerator if x > 0 or x == 0]
    dens = [y for y in denominator if y > 0]
    if not nums or not dens:
        return stats([])
    if len(nums) == len(dens):
        ratios = [x / y for x, y in zip(nums, dens, strict=True)]
    else:
        step_n = max(1, len(nums) * len(dens) // 10_000)
        ratios = [x / y for x in nums for y in dens][::step_n]
    return stats(ratios)


# ------------------------------------------------------------------------ formatting
def fmt_time(seconds: float | None) -> str:
    """Format a duration: ``812 ns``, ``12.3 µs``, ``4.56 ms``, ``1.23 s``."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "–"
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_stats_time(s: dict[str, float]) -> str:
    """Format time stats as ``median (p10–p90)``."""
    if not s or not s.get("n"):
        return "–"
    return f"{fmt_time(s['median'])} ({fmt_time(s['p10'])}–{fmt_time(s['p90'])})"


def fmt_ratio(s: dict[str, float] | None) -> str:
    """Format ratio stats as ``12.3× (10.1–14.0)``."""
    if not s or not s.get("n") or math.isnan(s["median"]):
        return "–"
    return f"{_num(s['median'])}× ({_num(s['p10'])}–{_num(s['p90'])})"


def _num(x: float) -> str:
    if x != 0 and abs(x) < 0.1:
        return f"{x:.2g}"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def fmt_int(x: float | int | None) -> str:
    """Format a count with thousands separators (``–`` for none)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{round(x):,}"


# ------------------------------------------------------------------------ environment
def versions() -> dict[str, str]:
    """Return the installed versions of the packages the suite measures or uses."""
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def machine() -> dict[str, Any]:
    """Return the machine facts the report starts with."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }
    try:
        psutil = importlib.import_module("psutil")
        info["memory"] = f"{psutil.virtual_memory().total / 2**30:.1f} GiB"
    except ImportError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        if commit:
            info["commit"] = commit
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def now() -> str:
    """Return the current UTC time, ISO formatted to the second."""
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


# ---------------------------------------------------------------------------- output
def progress_printer(prefix: str) -> Callable[[str], None]:
    """Return a function that prints progress lines to stderr, prefixed and timed."""
    import time

    started = time.perf_counter()

    def say(message: str) -> None:
        print(
            f"[{prefix} {time.perf_counter() - started:6.1f}s] {message}",
            file=sys.stderr,
            flush=True,
        )

    return say


def save_json(result: dict[str, Any], out: Path) -> Path:
    """Write one benchmark's result as ``<name>.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result.get('name', 'result')}.json"
    path.write_text(json.dumps(result, indent=1, default=_json_default, allow_nan=True), "utf-8")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


def load_results(out: Path) -> dict[str, dict[str, Any]]:
    """Return every ``*.json`` result in ``out`` by benchmark name."""
    found: dict[str, dict[str, Any]] = {}
    if not out.is_dir():
        return found
    for path in sorted(out.glob("*.json")):
        try:
            data = json.loads(path.read_text("utf-8"))
        except ValueError:
            continue
        if isinstance(data, dict):
            found[str(data.get("name", path.stem))] = data
    return found


def draw_charts(result: dict[str, Any], out: Path) -> list[str]:
    """Draw the result's charts as PNG files in ``out``; return the files written.

    Returns an empty list (and the report says so) when matplotlib is not installed.
    """
    specs = charts(result)
    if not specs:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if isinstance(result.setdefault("notes", []), list):
            result["notes"].append("charts skipped: matplotlib is not installed")
        return []
    written: list[str] = []
    out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=110)
        if spec.get("kind") == "bar":
            categories = list(spec.get("categories", []))
            series = spec.get("series", {})
            width = 0.8 / max(1, len(series))
            for index, (label, values) in enumerate(series.items()):
                xs = [i + index * width - 0.4 + width / 2 for i in range(len(categories))]
                ax.bar(xs, [v if v is not None else 0 for v in values], width, label=label)
            ax.set_xticks(range(len(categories)))
            ax.set_xticklabels(categories, rotation=15, ha="right")
        else:
            markers = "os^Dv<>p*h"
            for index, (label, points) in enumerate(spec.get("series", {}).items()):
                pts = [
                    (x, y) for x, y in points if y is not None and (y > 0 or not spec.get("ylog"))
                ]
                if not pts:
                    continue
                ax.plot(*zip(*pts, strict=True), marker=markers[index % len(markers)], label=label)
            if spec.get("xlog"):
                ax.set_xscale("log")
            if spec.get("ylog"):
                ax.set_yscale("log")
        ax.set_title(spec.get("title", ""))
        ax.set_xlabel(spec.get("x_label", ""))
        ax.set_ylabel(spec.get("y_label", ""))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / spec["file"]
        fig.savefig(path)
        plt.close(fig)
        written.append(spec["file"])
    return written


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return _num(value) if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Return a Markdown table."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines.extend("| " + " | ".join(_cell(v) for v in row) + " |" for row in rows)
    return "\n".join(lines)


def headlines(result: dict[str, Any]) -> list[str]:
    """Return the result's headline lines (a string or a list of strings)."""
    value = result.get("headline")
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []


def goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the result's goals in the suite's shape (other shapes: ``[]``)."""
    value = result.get("goals")
    if isinstance(value, list) and all(isinstance(g, dict) and "goal" in g for g in value):
        return value
    return []


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the result's tables in the suite's shape (other shapes: ``[]``)."""
    value = result.get("tables")
    if isinstance(value, list) and all(
        isinstance(t, dict)
        and isinstance(t.get("columns"), list)
        and isinstance(t.get("rows"), list)
        for t in value
    ):
        return value
    return []


def charts(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the result's chart specs in the suite's shape (other shapes: ``[]``)."""
    value = result.get("charts")
    if isinstance(value, list) and all(
        isinstance(c, dict) and isinstance(c.get("file"), str) and isinstance(c.get("series"), dict)
        for c in value
    ):
        return value
    return []


def _conforms(result: dict[str, Any], key: str) -> bool:
    readers = {"headline": headlines, "goals": goals, "tables": tables, "charts": charts}
    if key not in readers:
        return True
    return bool(readers[key](result)) or not result.get(key)


def _goal_mark(met: Any) -> str:
    if met is True:
        return "met"
    if met is False:
        return "**missed**"
    return "not measured"


def render_section(result: dict[str, Any]) -> str:
    """Return the Markdown section of one benchmark result."""
    name = result.get("name", "?")
    lines = [f"## {result.get('title', name)} (`{name}`)", ""]
    meta = []
    if result.get("mode"):
        meta.append(f"mode: {result['mode']}")
    if result.get("date"):
        meta.append(f"run: {result['date']}")
    if result.get("elapsed_s") is not None:
        meta.append(f"took {result['elapsed_s']:.1f} s")
    if meta:
        lines += ["_" + " · ".join(meta) + "_", ""]
    if result.get("status") and result["status"] != "ok":
        lines += [f"**{result['status']}**: {result.get('error', '')}", ""]
    if result.get("workload"):
        lines += [f"**Workload:** {result['workload']}", ""]
    if result.get("measured"):
        lines += [f"**What was measured:** {result['measured']}", ""]
    if headlines(result):
        lines += [*(f"- {h}" for h in headlines(result)), ""]
    if goals(result):
        lines.append(
            markdown_table(
                ["goal", "result", "detail"],
                [
                    [g.get("goal", ""), _goal_mark(g.get("met")), g.get("detail", "")]
                    for g in goals(result)
                ],
            )
        )
        lines.append("")
    for table in tables(result):
        if table.get("title"):
            lines += [f"### {table['title']}", ""]
        lines += [markdown_table(table["columns"], table["rows"]), ""]
        if table.get("note"):
            lines += [f"_{table['note']}_", ""]
    for chart in charts(result):
        if chart.get("drawn", True):
            lines += [f"![{chart.get('title', '')}]({chart['file']})", ""]
    known = {
        "name",
        "title",
        "mode",
        "date",
        "elapsed_s",
        "status",
        "error",
        "workload",
        "measured",
        "headline",
        "goals",
        "tables",
        "charts",
        "notes",
        "data",
    }
    generic = {k: v for k, v in result.items() if k not in known or not _conforms(result, k)}
    if generic:
        lines += [render_generic(generic), ""]
    notes = result.get("notes")
    if isinstance(notes, list) and notes:
        lines += ["Notes:", "", *(f"- {n}" for n in notes), ""]
    elif isinstance(notes, str) and notes:
        lines += [f"Notes: {notes}", ""]
    return "\n".join(lines)


def render_generic(data: dict[str, Any]) -> str:
    """Render a dict of unknown shape: scalars as a list, tables where possible, else JSON."""
    lines: list[str] = []
    scalars = {
        k: v for k, v in data.items() if isinstance(v, str | int | float | bool) or v is None
    }
    if scalars:
        lines += [f"- **{k}**: {_cell(v)}" for k, v in scalars.items()]
        lines.append("")
    for key, value in data.items():
        if key in scalars:
            continue
        if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            columns = list(dict.fromkeys(k for r in value for k in r))
            lines += [
                f"### {key}",
                "",
                markdown_table(columns, [[r.get(c) for c in columns] for r in value]),
                "",
            ]
        elif isinstance(value, dict) and value and all(isinstance(r, dict) for r in value.values()):
            columns = list(dict.fromkeys(k for r in value.values() for k in r))
            if all(not isinstance(r.get(c), dict | list) for r in value.values() for c in columns):
                rows = [[k, *(r.get(c) for c in columns)] for k, r in value.items()]
                lines += [f"### {key}", "", markdown_table(["", *columns], rows), ""]
                continue
            lines += _json_block(key, value)
        else:
            lines += _json_block(key, value)
    return "\n".join(lines)


def _json_block(key: str, value: Any) -> list[str]:
    text = json.dumps(value, indent=1, default=_json_default)
    if len(text) > 4000:
        text = text[:4000] + "\n… (cut; see the JSON file)"
    return [f"### {key}", "", "```json", text, "```", ""]


def render_report(results: Sequence[dict[str, Any]], *, unavailable: Sequence[str] = ()) -> str:
    """Return the whole Markdown report: machine, versions, summary, every section."""
    info = machine()
    lines = [
        "# context-harness benchmarks",
        "",
        f"Report written {now()}. Every speed figure is a ratio against a baseline measured "
        "in the same run (ours vs a peer, warm vs cold) with the median and the p10–p90 "
        "spread of repeated runs; absolute times are for reference only.",
        "",
        "## Machine",
        "",
        markdown_table(["", ""], [[k, v] for k, v in info.items()]),
        "",
        "## Versions",
        "",
        markdown_table(["package", "version"], list(versions().items())),
        "",
        "## Summary",
        "",
    ]
    for result in results:
        name = result.get("name", "?")
        heads = headlines(result)
        status = result.get("status", "ok")
        if status != "ok":
            lines.append(f"- `{name}`: {status} — {result.get('error', '')}")
        for head in heads:
            lines.append(f"- `{name}`: {head}")
        for goal in goals(result):
            lines.append(
                f"- `{name}` goal — {goal.get('goal')}: {_goal_mark(goal.get('met'))} "
                f"({goal.get('detail', '')})"
            )
    for name in unavailable:
        lines.append(f"- `{name}`: not available (its module is not in this checkout)")
    lines.append("")
    for result in results:
        lines += [render_section(result), ""]
    return "\n".join(lines).rstrip() + "\n"


def summary_lines(result: dict[str, Any]) -> list[str]:
    """Return the lines printed to stdout for one result."""
    name = result.get("name", "?")
    out = [f"== {result.get('title', name)} ({name}) =="]
    if result.get("status", "ok") != "ok":
        out.append(f"  {result['status']}: {result.get('error', '')}")
    if result.get("workload"):
        out.append(f"  workload: {result['workload']}")
    out += [f"  {h}" for h in headlines(result)]
    for goal in goals(result):
        out.append(
            f"  goal: {goal.get('goal')} -> {_goal_mark(goal.get('met')).strip('*')} "
            f"({goal.get('detail', '')})"
        )
    return out
