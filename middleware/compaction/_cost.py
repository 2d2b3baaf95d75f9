"""The cost-aware trigger: compact once carrying the long history has cost what compacting costs.

With a prompt cache a long history is cheap to carry: every round reads it from the cache
(0.1× the input price on Anthropic and gpt-5, 0.5× on gpt-4o) and pays the full price only
for what is new. A compaction is not free: the summary request reads the early part (from
the cache, when asked in place) and writes the summary at the output price, and the
compacted history is a new prefix, which the next request pays at the cache-*write* price
(1.25× the input price on Anthropic). Whether compacting now is cheaper depends on the
prices and on how many more rounds the session runs — which nobody knows.

The rule is the classic answer to rent-or-buy under an unknown horizon. Let ``C`` be the
history a compaction would leave (the pinned task, a summary, the kept messages). Every
round whose history ``H`` is longer pays *rent*: ``r·(H − C)`` more than it would after a
compaction (``r`` the cached-input price). Compacting is *buying*: the summary request,
plus writing ``C`` to the cache instead of reading it, ``(w − r)·C`` (``w`` the cache-write
price). The trigger compacts in the first round where the rent paid since the history
outgrew ``C`` — the rounds of the working history, this one included — reaches that price::

    Σ r·max(0, Hᵢ − C)  ≥  summary request + (w − r)·(C − g)

(``g``: this round's new tokens, which both sides write). Why this rule:

- whenever the session stops, what a compaction cycle cost is at most about twice what the
  better choice in hindsight would have cost (the rent-or-buy argument: the rent paid never
  exceeds the price before buying, and buying never comes before the rent reached it);
- for a session that goes on at a steady growth ``g`` a round, it compacts where the bill per
  round is lowest: when ``(H − C)² ≈ 2·g·price / r`` (the rent grows by ``r·g`` a round, so
  the rent of a cycle is ``r·(H − C)²/2g``; the mean cost per round is lowest where it
  equals the price);
- it needs no guessed horizon: the prices and the session's own growth decide. On Sonnet
  prices (cached 0.1×, writes 1.25×) it waits longer than on gpt-4o's (0.5×, free writes).

A comparison over a fixed number ``K`` of rounds ahead was the alternative: with the
default keep range and a few rounds it finds that a compaction never pays back on
Anthropic's prices and waits for the budget, while a ``K`` large enough to avoid that is
arbitrary. The history budget still binds: a history that would not fit compacts whatever
the prices. Where the prices are unknown (a local model, a client that does not say them),
the plain threshold (`middleware.compaction._settings.DEFAULT_TRIGGER`) applies instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from harness.types import KnowsPrices, ModelClient, TokenPrices

EXPECTED_SUMMARY_TOKENS: Final = 1_000
"""The summary's length in tokens when no earlier summary says how long they run."""

INSTRUCTION_TOKENS: Final = 200
"""The in-place summary instruction (`middleware.compaction._in_place.IN_PLACE_PROMPT`)."""


class CompactionCost(msgspec.Struct, frozen=True, kw_only=True):
    """One decision's figures, in US dollars (see the module docstring)."""

    rent: float
    """What the rounds of the working history paid for carrying more than the compacted
    history, this round included."""
    price: float
    """What compacting now costs beyond a round over the compacted history: the summary
    request and the cache write of the compacted history."""

    @property
    def pays(self) -> bool:
        """Whether compacting now is due: the rent paid reached the price."""
        return self.rent >= self.price


def compaction_cost(
    prices: TokenPrices,
    *,
    rounds: Iterable[int],
    new: int,
    compacted: int,
    summary_cached: int,
    summary_fresh: int,
    summary_output: int,
    summary_prices: TokenPrices | None = None,
) -> CompactionCost:
    """Return the rent paid so far and the price of compacting now.

    Args:
        prices: the agent's model's prices.
        rounds: the history's tokens at each request of the working history, this one
            (``H``) included, oldest first.
        new: tokens new since the previous request (``g``): this round's messages.
        compacted: tokens of the history after compacting (``C``).
        summary_cached: input tokens of the summary request the cache serves (in place: the
            prefix up to the cut).
        summary_fresh: its input tokens at the full price (the instruction, or a transcript).
        summary_output: its output: the summary's tokens.
        summary_prices: the summariser's prices when it is another model.
    """
    r, w = prices.cached_input, prices.cache_write
    rent = r * sum(h - compacted for h in rounds if h > compacted)
    s = summary_prices or prices
    summary = s.cached_input * summary_cached + s.input * summary_fresh + s.output * summary_output
    price = summary + (w - r) * max(0, compacted - new)
    return CompactionCost(rent=rent, price=price)


def prices_of(client: ModelClient | None, model: str) -> TokenPrices | None:
    """Return ``client``'s prices for ``model`` (`harness.types.KnowsPrices`), or ``None``."""
    if client is None or not isinstance(client, KnowsPrices):
        return None
    found = client.token_prices(model)
    return found if isinstance(found, TokenPrices) else None
