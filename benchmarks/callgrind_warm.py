"""Instructions per warm round under callgrind: an A/B figure that a shared machine cannot blur.

Wall-clock time on a machine shared with other work cannot resolve a few per cent; the number
of instructions a round executes can. This script drives our stack as
`benchmarks.bench_overhead.measure_ours_as_hooks` does (the like-for-like figure of the
overhead benchmark: a loop that appends a tool call and its result, builds the request and runs
it through the composed stack to a handler that builds the manifest) and marks the start and
end of every round's preparation with a call to ``os.getppid`` (one libc function nothing else
in a round calls). Run under callgrind with ``--dump-before=getppid``, every mark writes a dump
of the instructions since the last one, so every second dump holds exactly one round's
preparation (outermost middleware to manifest, as `benchmarks.peers.PrepClock` times it).

Usage, from the checkout to measure (the script takes the checkout's own
``measure_ours_as_hooks``, so it runs unchanged on older revisions)::

    PYTHONHASHSEED=0 PYTHONPATH=<checkout> valgrind --tool=callgrind --dump-before=getppid \\
        --callgrind-out-file=<dir>/cg.%p --dump-instr=no \\
        <python> <this file> --config concerns --messages 2000 --rounds 25
    <python> <this file> --read <dir>   # per-round counts, median of the warm rounds

``--config``: ``concerns`` (``[BudgetFit, Compaction, PairValidation]``, the "same concerns,
compacting" configuration), ``default`` (the whole default stack, compacting) or ``none`` (the
default stack without Compaction, nothing dropped). Round 0 (the cold round) is reported
apart and left out of the median.

Compare like with like: the workload is the SWE-agent trajectories when the checkout has a
``shared`` folder beside it (``/work/shared`` for ``/work/<tree>``) and generated runs when it
has not (a ``git worktree add /tmp/x`` checkout), and the two differ by ~10 % per round. Put
every checkout of an A/B in the same kind of place; the run prints the number of messages it
replayed. Counts repeat within ~0.1 % (message and call ids are fresh per run); compare the
rounds paired (the same step in both runs carries the same tool output).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CONFIGS = {
    "concerns": {"compaction": True, "concerns_only": True},
    "default": {"compaction": True, "concerns_only": False},
    "none": {"compaction": False, "concerns_only": False},
}


def _mark() -> None:
    """Call the libc function callgrind dumps before (``--dump-before=getppid``)."""
    os.getppid()


async def _run(config: str, messages: int, rounds: int) -> None:
    from benchmarks import bench_overhead
    from benchmarks.peers import PrepClock
    from benchmarks.workloads import history, tool_results
    from harness.tokens import clear_count_caches

    class MarkedClock(PrepClock):
        """`PrepClock` that also marks the start and end of every round for callgrind."""

        async def __call__(self, request: Any, call_next: Any) -> Any:
            _mark()
            return await super().__call__(request, call_next)

        def observe(self, manifest: Any) -> None:
            super().observe(manifest)
            _mark()

    setattr(bench_overhead, "PrepClock", MarkedClock)  # noqa: B010 (the module reads it per run)
    session = history(messages)
    outputs = tool_results(session)
    clear_count_caches()
    with tempfile.TemporaryDirectory(prefix="callgrind-warm-") as tmp:
        result = await bench_overhead.measure_ours_as_hooks(
            session, outputs, rounds, Path(tmp), collect=True, **CONFIGS[config]
        )
    print(
        f"{len(session.messages):,} messages, {len(result['warm'])} warm rounds, "
        f"sent cold {result['sent_cold']}, sent warm {result['sent_warm']}",
        file=sys.stderr,
    )


def _totals(directory: Path) -> list[int]:
    """Return the instruction totals of the dumps in ``directory``, in dump order."""
    found: list[tuple[int, int]] = []
    for path in directory.iterdir():
        number = re.search(r"\.(\d+)$", path.name)
        if number is None:
            continue  # the final dump (no part number): after the last round
        text = path.read_text(errors="replace")
        total = re.search(r"^(?:summary|totals):\s*(\d+)", text, re.MULTILINE)
        found.append((int(number.group(1)), int(total.group(1)) if total else 0))
    return [t for _, t in sorted(found)]


def read(directory: Path) -> dict[str, Any]:
    """Return the per-round instruction counts of a run's dumps and their warm median."""
    totals = _totals(directory)
    # dump k is written at mark k: odd marks close a round (start = even mark, end = odd)
    rounds = totals[1::2]
    warm = rounds[1:]
    return {
        "cold": rounds[0] if rounds else 0,
        "warm": warm,
        "median": statistics.median(warm) if warm else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="concerns")
    parser.add_argument("--messages", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--read", type=Path, help="print the counts of a run's dump folder")
    args = parser.parse_args()
    if args.read is not None:
        got = read(args.read)
        print(f"cold {got['cold']:,}; warm median {got['median']:,.0f} over {len(got['warm'])}")
        print("warm:", " ".join(f"{w:,}" for w in got["warm"]))
        return
    asyncio.run(_run(args.config, args.messages, args.rounds))


if __name__ == "__main__":
    main()
