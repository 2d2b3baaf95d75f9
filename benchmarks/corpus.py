"""Workloads for the token-estimation benchmark and the estimator fit.

Three sources, each workload says which it is:

- ``real``: files under ``../shared`` next to the project root, when present — SWE-agent
  trajectories (``data/swe-agent-trajectories/*.traj``) and the Chinese seed documents
  (``seeds/*.zh.*``). A user's clone has no ``../shared``; everything else still runs.
- ``stdlib``: real text that ships with every CPython — the source of a fixed list of
  standard-library modules (code, comments, docstrings) and the English reference prose of
  ``pydoc_data.topics``. It depends on the Python version, not on a seed.
- ``synthetic``: one workload per text class of `benchmarks.generators` (deterministic for
  a seed), and a generated agent session that interleaves them with tool calls.

Every workload is a tuple of `harness.messages.Message`, so the benchmark measures what the
library counts: message text, tool-call names and arguments, framing.
"""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from benchmarks.generators import GENERATORS, gen_agent_session, length_sampler
from benchmarks.trajectories import SHARED, read_history, trajectory_files
from harness.messages import Message

Source = Literal["real", "stdlib", "synthetic"]

SEEDS_DIR = SHARED / "seeds"


@dataclass(frozen=True)
class Workload:
    """A named list of messages to count."""

    name: str
    source: Source
    description: str
    messages: tuple[Message, ...]

    @property
    def chars(self) -> int:
        """Characters of text the estimators see (content, tool-call names and arguments)."""
        return sum(len(t) for t in self.texts())

    def texts(self) -> Iterator[str]:
        """Yield every text an estimator counts in these messages."""
        for message in self.messages:
            yield from message_texts(message)


def message_texts(message: Message) -> Iterator[str]:
    """Yield the texts `CachedEstimator` counts for one message (empty ones skipped)."""
    if message.text:
        yield message.text
    for call in message.tool_calls:
        yield call.name
        if call.arguments:
            yield call.arguments
    if message.reasoning_content:
        yield message.reasoning_content
    if message.name:
        yield message.name


# ----------------------------------------------------------------------- real data
def split_document(text: str, rng: random.Random, *, max_chars: int = 1200) -> list[str]:
    """Split a document into message-sized pieces: paragraphs, long ones at sentence ends.

    A paragraph longer than ``max_chars`` is cut after a random 1–8 sentences (``。``,
    ``！``, ``？``, ``. ``), so pieces have the spread of lengths of real chat messages.
    """
    pieces: list[str] = []
    for paragraph in text.split("\n\n"):
        paragraph = paragraph.strip("\n")
        if not paragraph.strip():
            continue
        if len(paragraph) <= max_chars:
            pieces.append(paragraph)
            continue
        sentences: list[str] = []
        start = 0
        for i, ch in enumerate(paragraph):
            if ch in "。！？" or (ch == "." and paragraph[i + 1 : i + 2] == " "):
                sentences.append(paragraph[start : i + 1])
                start = i + 1
        if start < len(paragraph):
            sentences.append(paragraph[start:])
        while sentences:
            take = rng.randint(1, 8)
            pieces.append("".join(sentences[:take]))
            del sentences[:take]
    return pieces


def real_workloads(shared: Path = SHARED, *, seed: int = 0) -> list[Workload]:
    """Return the workloads built from ``../shared`` (an empty list when it is absent)."""
    out: list[Workload] = []
    trajectories = trajectory_files(shared / "data" / "swe-agent-trajectories")
    if trajectories:
        messages = [m for path in trajectories for m in read_history(path)]
        out.append(
            Workload(
                "swe-agent-trajectories",
                "real",
                f"{len(trajectories)} SWE-agent runs, every history message",
                tuple(messages),
            )
        )
    seeds = sorted((shared / "seeds").glob("*.zh.*"))
    if seeds:
        rng = random.Random(seed)
        pieces = [p for path in seeds for p in split_document(path.read_text("utf-8"), rng)]
        out.append(
            Workload(
                "zh-seeds",
                "real",
                f"{len(seeds)} Chinese documents split into {len(pieces)} paragraph messages",
                tuple(Message.user(p) for p in pieces),
            )
        )
    return out


# ------------------------------------------------------------------ stdlib text
STDLIB_MODULES = (
    "argparse.py",
    "asyncio/base_events.py",
    "asyncio/tasks.py",
    "collections/__init__.py",
    "dataclasses.py",
    "email/_header_value_parser.py",
    "functools.py",
    "http/client.py",
    "json/decoder.py",
    "logging/__init__.py",
    "pathlib.py",
    "subprocess.py",
    "typing.py",
    "unittest/mock.py",
    "zipfile.py",
)


def _chunks(text: str, rng: random.Random, count: int, lengths: Callable[[], int]) -> list[str]:
    """Cut ``count`` line-aligned pieces of roughly ``lengths()`` characters from ``text``."""
    lines = text.splitlines(keepends=True)
    pieces: list[str] = []
    for _ in range(count):
        want = lengths()
        i = rng.randrange(len(lines))
        piece: list[str] = []
        size = 0
        while size < want and i < len(lines):
            piece.append(lines[i])
            size += len(lines[i])
            i += 1
        text_piece = "".join(piece).strip("\n")
        if text_piece:
            pieces.append(text_piece)
    return pieces


def stdlib_workloads(*, seed: int = 0, count: int = 200) -> list[Workload]:
    """Return real code and prose shipped with CPython, cut into message-sized pieces."""
    rng = random.Random(seed)
    lengths = length_sampler(rng)
    out: list[Workload] = []
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    sources = [stdlib / name for name in STDLIB_MODULES if (stdlib / name).exists()]
    if sources:
        code = "\n".join(p.read_text("utf-8") for p in sources)
        out.append(
            Workload(
                "stdlib-code",
                "stdlib",
                f"pieces of {len(sources)} standard-library modules",
                tuple(Message.tool("call_0", p) for p in _chunks(code, rng, count, lengths)),
            )
        )
    topics: dict[str, str] = {}
    try:
        from pydoc_data import topics as pydoc_topics

        topics = dict(pydoc_topics.topics)
    except ImportError:  # pragma: no cover - some distributions strip pydoc_data
        pass
    if topics:
        prose = "\n\n".join(topics[k] for k in sorted(topics))
        out.append(
            Workload(
                "stdlib-prose",
                "stdlib",
                "the English reference prose of pydoc_data.topics",
                tuple(Message.user(p) for p in _chunks(prose, rng, count, lengths)),
            )
        )
    return out


def synthetic_workloads(*, seed: int = 0, count: int = 200) -> list[Workload]:
    """Return one generated workload per kind, ``count`` messages each, plus a session."""
    out: list[Workload] = []
    for index, (name, (generator, description)) in enumerate(GENERATORS.items()):
        rng = random.Random(f"{seed}:{index}:{name}")
        lengths = length_sampler(rng)
        texts = [generator(rng, lengths()) for _ in range(count)]
        out.append(
            Workload(name, "synthetic", description, tuple(Message.tool("c", t) for t in texts))
        )
    rng = random.Random(f"{seed}:session")
    session = gen_agent_session(rng, max(4, count // 2))
    out.append(
        Workload(
            "agent-session",
            "synthetic",
            "a generated agent session: prompt, task, tool calls and mixed tool output",
            tuple(session),
        )
    )
    return out


def all_workloads(
    *, quick: bool = False, seed: int = 0, shared: Path = SHARED, count: int | None = None
) -> list[Workload]:
    """Return every workload: real (when ``../shared`` exists), stdlib, then synthetic."""
    count = count or (60 if quick else 240)
    return [
        *real_workloads(shared, seed=seed),
        *stdlib_workloads(seed=seed, count=count),
        *synthetic_workloads(seed=seed, count=count),
    ]


if __name__ == "__main__":
    for workload in all_workloads(quick=True):
        print(
            f"{workload.name:24s} {workload.source:9s} {len(workload.messages):5d} msgs "
            f"{workload.chars:9,d} chars  {workload.description}"
        )
