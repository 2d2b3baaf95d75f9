"""What a run already saw of a history: the length of the prefix two histories share.

Between two rounds of one agent call the working history only grows: the agent commits the
history a round sent and appends the reply and the tool results, so the next request starts
with the very same message objects. Work done per message (a token count, a pair check, an
offload decision) can therefore be kept for that prefix and done only for what is new; a
middleware that rewrites a message (offload, trimming, compaction) makes the prefix end
there. `shared_prefix` finds where, comparing with C-speed tuple equality (identity first).
"""

from __future__ import annotations

from harness.messages import Message


def shared_prefix(old: tuple[Message, ...], new: tuple[Message, ...]) -> int:
    """Return how many leading messages ``new`` shares with ``old`` (the same or equal ones).

    Equal but distinct messages count as shared: everything derived from a message depends
    on its content only. Costs one pointer comparison per shared message when ``old`` is a
    prefix of ``new`` (the usual case); otherwise a binary search over prefix equality, whose
    comparisons stop at the first difference.
    """
    n = min(len(old), len(new))
    if n == 0:
        return 0
    if old[:n] == new[:n]:
        return n
    low, high = 0, n  # old[:low] == new[:low] and old[:high] != new[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if old[:middle] == new[:middle]:
            low = middle
        else:
            high = middle
    return low
