"""What a run already saw of a history: the length of the prefix two histories share.

Between two rounds of one agent call the working history only grows: the agent commits the
history a round sent and appends the reply and the tool results, so the next request starts
with the very same message objects. Work done per message (a token count, a pair check, an
offload decision) can therefore be kept for that prefix and done only for what is new; a
middleware that rewrites a message (offload, trimming, compaction) makes the prefix end
there. `shared_prefix` finds where: on CPython by comparing the two tuples' arrays of item
pointers with ``memcmp`` (identity, well under 1 ns a message), else with tuple equality.
That is the one O(history) step left per round, and the last few answers are kept in the
run: the middleware that ask about the same pair of histories in one round pay for it once.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from harness.messages import Message

if TYPE_CHECKING:
    from harness.request import RunScope

T = TypeVar("T")


def shared_prefix(
    old: tuple[Message, ...], new: tuple[Message, ...], run: RunScope | None = None
) -> int:
    """Return how many leading messages ``new`` shares with ``old`` (the same or equal ones).

    Equal but distinct messages count as shared: everything derived from a message depends
    on its content only. Costs one pointer comparison per shared message when ``old`` is a
    prefix of ``new`` (the usual case); otherwise a binary search over prefix equality, whose
    comparisons stop at the first difference. With ``run``, the answers for the last few
    pairs asked in that run are reused.
    """
    answers: _Answers | None = None
    if run is not None:  # run.slot(_Answers, _Answers), inlined: asked a few times a round
        answers = run.slots.get(_ANSWERS_KEY)
        if answers is None:
            answers = run.slots[_ANSWERS_KEY] = _Answers()
        for answer in answers:
            if answer[1] is new and answer[0] is old:
                return answer[2]
    shared = _compare(old, new)
    if answers is not None:
        if len(answers) >= _KEPT_ANSWERS:
            del answers[0]
        answers.append((old, new, shared))
    return shared


def _compare(old: tuple[T, ...], new: tuple[T, ...]) -> int:
    n = min(len(old), len(new))
    if n == 0:
        return 0
    if (n >= _MEMCMP_FROM and _same_objects(old, new, n)) or old[:n] == new[:n]:
        return n
    low, high = 0, n  # old[:low] == new[:low] and old[:high] != new[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if old[:middle] == new[:middle]:
            low = middle
        else:
            high = middle
    return low


def _same_objects(old: tuple[T, ...], new: tuple[T, ...], n: int) -> bool:
    """Return whether the first ``n`` items of both tuples are the very same objects.

    On CPython a tuple stores its items as an array of pointers after a fixed header
    (``tuple.__basicsize__``), so comparing the two arrays' bytes with the C library's
    ``memcmp`` compares identities in place: about 3 µs for 10,000 messages, against ~30 µs
    for ``old[:n] == new[:n]`` (which copies the slice and touches every message) and as
    much for copying both arrays into bytes first. Both tuples are alive during the call,
    so no address can be reused. Elsewhere, or when the bytes differ, the caller falls
    back to ``==``.
    """
    compare = _memcmp()
    if compare is None:
        return False
    start = tuple.__basicsize__
    return compare(id(old) + start, id(new) + start, _POINTER * n) == 0


_POINTER = struct.calcsize("P")
_MEMCMP_FROM = 64
"""Below this many items ``==`` beats a ``memcmp`` call (~1 µs warm, 5–12 µs measured in a
warm agent round, where ctypes' call path is out of the cache: ToolResultOffload's check of a
25-message working history went from ~8 to ~4 µs with ``==``). Not much further: ``==`` and
the slices it needs touch every message's reference count, so at thousands of messages out
of the cache the call wins."""
_MEMCMP: list[Callable[[int, int, int], int] | None] = []
"""The C library's ``memcmp`` once looked up (``[None]``: not on this interpreter)."""


def _memcmp() -> Callable[[int, int, int], int] | None:
    """Return the C library's ``memcmp`` on CPython (looked up once), else ``None``."""
    if _MEMCMP:
        return _MEMCMP[0]
    found: Callable[[int, int, int], int] | None = None
    if sys.implementation.name == "cpython" and tuple.__itemsize__ == _POINTER:
        import ctypes  # only here: a few milliseconds, paid by the first comparison

        try:  # PyDLL: the call keeps the GIL (a CDLL call lets other threads run meanwhile)
            libc = ctypes.PyDLL("msvcrt" if sys.platform == "win32" else None)
            function = libc.memcmp
        except (AttributeError, OSError):
            function = None
        if function is not None:
            function.restype = ctypes.c_int
            function.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
            found = function
    _MEMCMP.append(found)
    return found


_KEPT_ANSWERS = 4
"""Answers a run keeps: the layers compare their own last history with the new one, so a
round asks about a few different pairs (each kept answer holds both histories alive)."""


class _Answers(list[tuple[tuple[Message, ...], tuple[Message, ...], int]]):
    """A run's last `shared_prefix` answers as (old, new, shared), oldest first.

    Holding both histories keeps their ids theirs while the answer is kept.
    """


_ANSWERS_KEY = id(_Answers)
"""Where a run keeps its `_Answers` (`RunScope.slots` is keyed by owner ids; the class is the
owner, alive as long as the module)."""
