"""The typed result of one benchmark: `Result`, with its `Goal`, `Table` and `Chart` parts.

A benchmark's ``measure`` returns a plain dict of this shape; the runner
(`benchmarks._report.run_measure`) converts it once with `to_result`, and the report reads
nothing but `Result`. A dict of any other shape — an unknown key, a missing ``workload``, a
goal whose ``met`` is not a bool — is refused there with `ResultShapeError`, which names the
benchmark and the offending path (``$.goals[0].met``). Raw figures a benchmark wants to keep go
in ``data``: they are saved in the JSON file and not rendered.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Mode = Literal["full", "quick", "smoke"]
"""How long a benchmark runs: ``full`` (``make bench``), ``quick`` (under a minute) or ``smoke``
(only checks the output; the test suite uses it)."""

Cell = str | int | float | bool | None
"""One table cell."""


class Goal(msgspec.Struct, forbid_unknown_fields=True):
    """A goal the benchmark checks: ``met`` is None when the mode did not measure it."""

    goal: str
    met: bool | None
    detail: str = ""


class Table(msgspec.Struct, forbid_unknown_fields=True):
    """A table of the report; ``note`` is printed under it."""

    columns: list[str]
    rows: list[list[Cell]]
    title: str = ""
    note: str = ""


class Chart(msgspec.Struct, forbid_unknown_fields=True):
    """A PNG chart drawn next to the report.

    A line chart's series are ``{label: [[x, y], …]}`` (``y`` None for a missing point); a bar
    chart (``kind="bar"``) has ``categories`` and series ``{label: [value per category]}``.
    ``drawn`` is set by the runner once the file is written.
    """

    file: str
    series: dict[str, list[float | tuple[float, float | None] | None]]
    title: str = ""
    x_label: str = ""
    y_label: str = ""
    xlog: bool = False
    ylog: bool = False
    kind: Literal["line", "bar"] = "line"
    categories: list[str] = []
    y_unit: Literal["", "s"] = ""
    """``"s"``: the values are seconds, drawn in ns, µs, ms or s, whichever reads best."""
    x_integer: bool = False
    """Integer ticks on the x axis (request numbers, rounds)."""
    drawn: bool = False


class Result(msgspec.Struct, forbid_unknown_fields=True):
    """One benchmark's result.

    ``workload`` says which workload was used and ``measured`` what exactly was timed or
    counted; ``headline`` holds the summary lines. ``status``, ``error``, ``date``, ``elapsed_s`` and
    ``cpu_s`` are the runner's.
    """

    name: str
    title: str
    mode: Mode
    workload: str
    measured: str = ""
    headline: list[str] = []
    readme: list[str] = []
    """The few figures the README's table shows, each naming its configuration (default: the
    first headline lines)."""
    goals: list[Goal] = []
    tables: list[Table] = []
    charts: list[Chart] = []
    notes: list[str] = []
    data: dict[str, Any] = {}
    status: Literal["ok", "failed"] = "ok"
    error: str = ""
    date: str = ""
    elapsed_s: float | None = None
    cpu_s: float | None = None
    """The process's CPU time over the run (wall time on idle cores, for a busy machine)."""


class ResultShapeError(ValueError):
    """Raised when a benchmark returns something that is not a `Result`."""


def to_result(raw: object, *, name: str, title: str, mode: Mode) -> Result:
    """Convert what ``measure`` returned to a `Result`.

    ``name`` is always the registry's; ``title`` and ``mode`` are defaults the dict may set.

    Raises:
        ResultShapeError: when ``raw`` is not a dict of `Result`'s shape; the message names the
            benchmark and the path of the first wrong value.
    """
    if isinstance(raw, Result):
        return msgspec.structs.replace(raw, name=name)
    if not isinstance(raw, dict):
        raise ResultShapeError(
            f"benchmark {name!r} returned {type(raw).__name__}, not a dict of "
            "benchmarks.result.Result's shape"
        )
    try:
        return msgspec.convert({"title": title, "mode": mode, **raw, "name": name}, Result)
    except msgspec.ValidationError as exc:
        raise ResultShapeError(
            f"benchmark {name!r} returned a result that is not a benchmarks.result.Result: {exc}"
        ) from exc
