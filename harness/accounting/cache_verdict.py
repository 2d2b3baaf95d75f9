"""Did the provider's prompt cache serve what our layout kept? One verdict per request.

`harness.accounting.cache_break` names what broke the cached prefix; this module says how
many tokens the prefix that was kept holds (``cache_expected``: what the request shares with
the session's previous agent request, `SharedPrefix`) and compares it with the cached input
the provider reported once it answered (`Usage.cached_tokens`):

- ``agree`` — the provider served about what we kept;
- ``provider_miss`` — we kept the prefix and the provider served much less: its cache entry
  expired (Anthropic's 5 minutes, OpenAI's 5–60), the request went to another replica or
  region, or (Anthropic) no ``cache_control`` mark covered it;
- ``break_confirmed`` — our request broke the prefix (a ``cache_break`` was named) and the
  provider served no more than the part before the break;
- ``unexpected_hit`` — the provider served more than the session's previous request
  explains (another session with the same System and tools, a warm cache from an earlier
  process);
- ``None`` — the provider reports no cached tokens (`Usage.cache_reported`).

**Tolerance.** The expectation is our estimate; the provider counts with its own tokenizer,
so the expectation is first scaled by the provider's prompt tokens over our estimate of the
whole request. Providers then cache in steps: OpenAI nothing under 1,024 tokens and then in
128-token blocks; Anthropic nothing under 1,024 (Sonnet, Opus; 2,048 for Haiku) and only up
to a marked block, found within 20 blocks. So served and expected agree within
`CACHE_SLACK_TOKENS` (one minimum prefix) or `CACHE_SLACK_SHARE` of the expectation,
whichever is larger: a round that adds a few blocks past the last mark, or a prompt under
the minimum, still agrees; a cache that served nothing of a 5,000-token prefix does not.
"""

from __future__ import annotations

from typing import Final

import msgspec

from harness.accounting._tally import HistoryTally
from harness.accounting.cache_break import SharedPrefix
from harness.manifest import CacheVerdict, ContextManifest, Usage

CACHE_SLACK_TOKENS: Final = 1_024
"""Served and expected tokens this close agree: the smallest prefix OpenAI and Anthropic
cache, which also covers OpenAI's 128-token blocks and the blocks added past a mark."""
CACHE_SLACK_SHARE: Final = 0.10
"""… or this share of the expectation, for long prefixes (the estimate's error after
scaling, the provider's framing of messages and tools)."""


def expected_cached(shared: SharedPrefix, tally: HistoryTally) -> int:
    """Return the estimated tokens of the shared prefix (by ``tally``'s estimator).

    ``tally`` must have measured the request last (`harness.accounting.build_manifest` asks
    after its items): the leading pieces cost three sums, the history a prefix-sum look-up.
    """
    tokens = tally.costs.leading(shared.pieces)
    if shared.pieces >= 3 and shared.messages:
        sums = tally.sums
        tokens += sums[min(shared.messages, len(sums) - 1)]
    return tokens


def cache_verdict(
    expected: int | None, *, broke: bool, usage: Usage | None, estimated: int
) -> CacheVerdict | None:
    """Return how ``usage``'s cached input compares with ``expected`` (module docstring).

    Args:
        expected: the manifest's ``cache_expected`` (``None``: not recorded, no verdict).
        broke: whether the manifest named a ``cache_break``.
        usage: what the provider reported (``None``, or without cached tokens: no verdict).
        estimated: the manifest's estimate of the whole request, to scale ``expected`` to
            the provider's count.
    """
    if expected is None or usage is None or not usage.cache_reported:
        return None
    scale = usage.prompt_tokens / estimated if usage.prompt_tokens > 0 and estimated > 0 else 1.0
    want = expected * scale
    slack = max(CACHE_SLACK_TOKENS, CACHE_SLACK_SHARE * want)
    served = usage.cached_tokens
    if served > want + slack:
        return "unexpected_hit"
    if broke:
        return "break_confirmed"
    return "agree" if served >= want - slack else "provider_miss"


def answered(manifest: ContextManifest, usage: Usage | None) -> ContextManifest:
    """Return ``manifest`` with the provider's ``usage`` and the cache verdict it gives."""
    verdict = cache_verdict(
        manifest.cache_expected,
        broke=manifest.cache_break is not None,
        usage=usage,
        estimated=manifest.estimated_input_tokens,
    )
    return msgspec.structs.replace(manifest, usage=usage, cache_verdict=verdict)


__all__ = [
    "CACHE_SLACK_SHARE",
    "CACHE_SLACK_TOKENS",
    "answered",
    "cache_verdict",
    "expected_cached",
]
