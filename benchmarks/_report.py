"""Statistics, the Markdown report and the PNG charts of the benchmark suite.

A benchmark's ``measure`` returns a plain, JSON-serialisable dict of the shape of
`benchmarks.result.Result` (``name``, ``title``, ``mode``, ``workload``, ``measured``,
``headline``, ``goals``, ``tables``, ``charts``, ``notes`` and ``data``, the raw figures kept in
the JSON file only). `run_measure` converts it once; everything here reads only `Result`, and a
dict of another shape is refused with `benchmarks.result.ResultShapeError`.

Every speed figure is a ratio against a baseline measured in the same run, given with the
median and the spread (p10–p90) of repeated runs; absolute times are printed for reference
and never asserted.
"""

from __future__ import annotations

import contextlib
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
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from benchmarks.result import Mode as Mode
from benchmarks.result import Result, ResultShapeError, to_result

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
    measure: Callable[..., Any],
    mode: Mode,
    progress: Progress | None = None,
    *,
    name: str,
    title: str,
    **options: Any,
) -> Result:
    """Run a benchmark's ``measure(mode, progress, **options)`` and return its `Result`.

    An async ``measure`` runs in a fresh event loop. Only the options its signature names are
    passed, and never one that is ``None`` (``--model`` goes to ``providers`` alone). The dict
    it returns is converted once (`benchmarks.result.to_result`; ``name`` is always this one,
    ``title`` a default).

    Raises:
        ResultShapeError: when ``measure`` returns something of another shape.
    """
    params = inspect.signature(measure).parameters
    kwargs = {k: v for k, v in options.items() if v is not None and k in params}
    call = functools.partial(measure, mode, progress or _quiet, **kwargs)
    raw = anyio.run(call) if inspect.iscoroutinefunction(measure) else call()
    return to_result(raw, name=name, title=title, mode=mode)


def _quiet(message: str) -> None:
    """Drop a progress line."""


class ProgressBar:
    """Reports a long loop's progress as a bar with a time estimate, through ``progress``.

    Call `step` once per item. A line is printed for the first and the last item and at
    most every ``every_s`` seconds in between, so a step of 261 s is never silent and a
    loop of 10,000 quick items does not flood the terminal.

    Args:
        progress: where the lines go (the runner's timed stderr printer).
        label: what is counted (``"texts counted"``).
        total: how many items the loop has.
        every_s: the most seconds between two lines.
    """

    WIDTH = 20

    def __init__(self, progress: Progress, label: str, total: int, *, every_s: float = 2.0) -> None:
        self.progress = progress
        self.label = label
        self.total = max(1, total)
        self.every_s = every_s
        self.done = 0
        self._started = time.perf_counter()
        self._last = -math.inf

    def step(self, message: str = "", count: int = 1) -> None:
        """Count ``count`` items done; print the bar when it is time (with ``message``)."""
        self.done = min(self.total, self.done + count)
        now_s = time.perf_counter()
        if self.done not in (1, self.total) and now_s - self._last < self.every_s:
            return
        self._last = now_s
        self.progress(self.line(message, now_s - self._started))

    def line(self, message: str, elapsed: float) -> str:
        """Return the bar line for the current count after ``elapsed`` seconds."""
        filled = round(self.WIDTH * self.done / self.total)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        left = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        eta = "" if self.done == self.total or math.isnan(left) else f", ~{left:,.0f} s left"
        tail = f" — {message}" if message else ""
        return f"[{bar}] {self.done:,}/{self.total:,} {self.label}{eta}{tail}"


@contextlib.contextmanager
def heartbeat(progress: Progress, label: str, *, every_s: float = 10.0) -> Iterator[None]:
    """Report ``label`` and the seconds spent every ``every_s`` while a long step runs.

    For a step that cannot count its own items (one library call that takes minutes): a
    daemon thread prints ``label: still running, 40 s`` until the block ends, then the total.
    """
    done = threading.Event()
    started = time.perf_counter()

    def beat() -> None:
        while not done.wait(every_s):
            progress(f"{label}: still running, {time.perf_counter() - started:,.0f} s")

    progress(f"{label} …")
    thread = threading.Thread(target=beat, name=f"heartbeat: {label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        progress(f"{label}: done in {time.perf_counter() - started:,.1f} s")


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


def save_json(result: Result, out: Path) -> Path:
    """Write one benchmark's result as ``<name>.json`` in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{result.name}.json"
    plain = msgspec.to_builtins(result, enc_hook=_json_default)
    path.write_text(json.dumps(plain, indent=1, allow_nan=True), "utf-8")
    return path


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def load_result(path: Path) -> Result:
    """Read one saved result.

    Raises:
        ResultShapeError: when the file is not JSON of `Result`'s shape.
    """
    try:
        return msgspec.convert(json.loads(path.read_text("utf-8")), Result)
    except (ValueError, msgspec.ValidationError) as exc:
        raise ResultShapeError(f"{path.name} is not a benchmark result: {exc}") from exc


def load_results(out: Path) -> tuple[dict[str, Result], list[str]]:
    """Return every ``*.json`` result in ``out`` by benchmark name, and why others were skipped."""
    found: dict[str, Result] = {}
    skipped: list[str] = []
    if not out.is_dir():
        return found, skipped
    for path in sorted(out.glob("*.json")):
        try:
            result = load_result(path)
        except ResultShapeError as exc:
            skipped.append(str(exc))
            continue
        found[result.name] = result
    return found, skipped


TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
"""The units a time axis is drawn in, largest first."""


def time_unit(values: Iterable[float]) -> tuple[float, str]:
    """Return the unit (its size in seconds and its name) that reads best for ``values``.

    The largest unit in which the median value is at least 0.1: 0.0004 s reads as 0.4 ms,
    0.00008 s as 80 µs, never as 4×10⁻⁴ s.
    """
    finite = sorted(v for v in values if v is not None and math.isfinite(v) and v > 0)
    if not finite:
        return 1.0, "s"
    middle = finite[len(finite) // 2]
    for size, name in TIME_UNITS:
        if middle >= 0.1 * size:
            return size, name
    return TIME_UNITS[-1]


def draw_charts(result: Result, out: Path) -> list[str]:
    """Draw the result's charts as PNG files in ``out``; return the files written.

    Axes read plainly: a chart whose values are seconds (``y_unit="s"``) is drawn in ms, µs
    or s, whichever fits; log axes carry plain numbers, not powers of ten; request numbers
    (``x_integer``) get integer ticks. Returns an empty list (and the result's notes say so)
    when matplotlib is not installed.
    """
    if not result.charts:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, MaxNLocator
    except ImportError:
        result.notes.append("charts skipped: matplotlib is not installed")
        return []
    plain = FuncFormatter(lambda value, _pos: f"{value:,.10g}")
    # Of a log axis's minor ticks, 2 and 5 of each decade are labelled, plainly: 20 and 50
    # rather than 2×10¹ and 5×10¹.
    plain_minor = FuncFormatter(
        lambda value, _pos: f"{value:,.10g}" if f"{value:.1g}"[0] in "25" else ""
    )
    written: list[str] = []
    out.mkdir(parents=True, exist_ok=True)
    for spec in result.charts:
        many = len(spec.categories) > 8
        width = max(7.5, 0.32 * len(spec.categories) * max(1, len(spec.series)) ** 0.5)
        fig, ax = plt.subplots(figsize=(min(width, 24.0), 5.2 if many else 4.6), dpi=110)
        y_label = spec.y_label
        scale = 1.0
        if spec.kind == "bar":
            if spec.y_unit == "s":
                scale, unit = time_unit(v for vs in spec.series.values() for v in _bar_values(vs))
                y_label = f"{y_label} ({unit})"
            width = 0.8 / max(1, len(spec.series))
            for index, (label, values) in enumerate(spec.series.items()):
                xs = [i + index * width - 0.4 + width / 2 for i in range(len(spec.categories))]
                ax.bar(xs, [v / scale for v in _bar_values(values)], width, label=label)
            ax.set_xticks(range(len(spec.categories)))
            ax.set_xticklabels(spec.categories, rotation=60 if many else 15, ha="right")
        else:
            series = {
                label: _line_points(points, spec.ylog) for label, points in spec.series.items()
            }
            if spec.y_unit == "s":
                scale, unit = time_unit(y for pts in series.values() for _, y in pts)
                y_label = f"{y_label} ({unit})"
            markers = "os^Dv<>p*h"
            for index, (label, pts) in enumerate(series.items()):
                if not pts:
                    continue
                xs = [x for x, _ in pts]
                ys = [y / scale for _, y in pts]
                ax.plot(xs, ys, marker=markers[index % len(markers)], label=label)
            if spec.xlog:
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(plain)
                ax.xaxis.set_minor_formatter(plain_minor)
            if spec.ylog:
                ax.set_yscale("log")
                ax.yaxis.set_major_formatter(plain)
                ax.yaxis.set_minor_formatter(plain_minor)
            if spec.x_integer:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(spec.title)
        ax.set_xlabel(spec.x_label)
        ax.set_ylabel(y_label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / spec.file)
        plt.close(fig)
        written.append(spec.file)
    return written


def _bar_values(values: Sequence[Any]) -> list[float]:
    return [float(v) if isinstance(v, int | float) else 0.0 for v in values]


def _line_points(points: Sequence[Any], ylog: bool) -> list[tuple[float, float]]:
    """Return the drawable ``(x, y)`` points of a line series (no gaps, positive on a log axis)."""
    out = []
    for point in points:
        if isinstance(point, tuple | list) and len(point) == 2:
            x, y = point
            if y is not None and (y > 0 or not ylog):
                out.append((float(x), float(y)))
    return out


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


def _goal_mark(met: bool | None) -> str:
    if met is True:
        return "met"
    if met is False:
        return "**missed**"
    return "not measured"


def render_section(result: Result) -> str:
    """Return the Markdown section of one benchmark result."""
    lines = [f"## {result.title} (`{result.name}`)", "", f"_mode: {result.mode}"]
    if result.date:
        lines[-1] += f" · run: {result.date}"
    if result.elapsed_s is not None:
        lines[-1] += f" · took {result.elapsed_s:.1f} s"
        if result.cpu_s is not None:
            lines[-1] += f" (CPU {result.cpu_s:.1f} s)"
    lines[-1] += "_"
    lines.append("")
    if result.status != "ok":
        lines += [f"**{result.status}**: {result.error}", ""]
    if result.workload:
        lines += [f"**Workload:** {result.workload}", ""]
    if result.measured:
        lines += [f"**What was measured:** {result.measured}", ""]
    if result.headline:
        lines += [*(f"- {h}" for h in result.headline), ""]
    if result.goals:
        rows = [[g.goal, _goal_mark(g.met), g.detail] for g in result.goals]
        lines += [markdown_table(["goal", "result", "detail"], rows), ""]
    for table in result.tables:
        if table.title:
            lines += [f"### {table.title}", ""]
        lines += [markdown_table(table.columns, table.rows), ""]
        if table.note:
            lines += [f"_{table.note}_", ""]
    lines += [f"![{c.title}]({c.file})\n" for c in result.charts if c.drawn]
    if result.notes:
        lines += ["Notes:", "", *(f"- {n}" for n in result.notes), ""]
    return "\n".join(lines)


def render_report(
    results: Sequence[Result],
    *,
    unavailable: Sequence[str] = (),
    skipped: Sequence[str] = (),
    failed: Sequence[Result] = (),
) -> str:
    """Return the whole Markdown report: a short summary, machine, versions, every section.

    ``unavailable`` names benchmarks whose module is missing; ``skipped`` says which saved
    files were not results (`load_results`); ``failed`` are this run's failures — where a good
    earlier result was kept, the report says its figures are from that run.
    """
    info = machine()
    lines = [
        "# context-harness benchmarks",
        "",
        f"Report written {now()}. Every speed figure is a ratio against a baseline measured "
        "in the same run (ours vs a peer, warm vs cold) with the median and the p10–p90 "
        "spread of repeated runs; absolute times are for reference only.",
        "",
        "## At a glance",
        "",
        *glance(results, failed),
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
        name = result.name
        if result.status != "ok":
            lines.append(f"- `{name}`: {result.status} — {result.error}")
        lines += [f"- `{name}`: {head}" for head in result.headline]
        lines += [
            f"- `{name}` goal — {g.goal}: {_goal_mark(g.met)} ({g.detail})" for g in result.goals
        ]
    for name in unavailable:
        lines.append(f"- `{name}`: not available (its module is not in this checkout)")
    for reason in skipped:
        lines.append(f"- skipped: {reason}")
    lines.append("")
    for result in results:
        lines += [render_section(result), ""]
    return "\n".join(lines).rstrip() + "\n"


def glance(results: Sequence[Result], failed: Sequence[Result] = ()) -> list[str]:
    """Return the report's opening summary: one line per benchmark, goals met and missed."""
    failures = {r.name: r for r in failed}
    lines = []
    for result in results:
        marks = [g.met for g in result.goals if g.met is not None]
        goals = f"{sum(marks)} of {len(marks)} goals met" if marks else "no goal measured"
        figures = result.readme or result.headline
        head = f" — {figures[0]}" if figures else ""
        took = f", took {result.elapsed_s:.0f} s" if result.elapsed_s is not None else ""
        line = f"- **{result.title}** (`{result.name}`, {result.mode}{took}): {goals}{head}"
        if result.status != "ok":
            line = f"- **{result.title}** (`{result.name}`): **failed** — {result.error}"
        lines.append(line)
        fresh = failures.get(result.name)
        if fresh is not None and result.status == "ok":
            lines.append(
                f"  - **the latest run failed** ({fresh.date}: {fresh.error}); the figures are "
                f"from the last good run ({result.date})"
            )
    return lines or ["- no results yet"]


def summary_lines(result: Result) -> list[str]:
    """Return the lines printed to stdout for one result."""
    out = [f"== {result.title} ({result.name}) =="]
    if result.status != "ok":
        out.append(f"  {result.status}: {result.error}")
    if result.workload:
        out.append(f"  workload: {result.workload}")
    out += [f"  {h}" for h in result.headline]
    out += [
        f"  goal: {g.goal} -> {_goal_mark(g.met).strip('*')} ({g.detail})" for g in result.goals
    ]
    return out
