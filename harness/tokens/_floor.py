"""A count that is never above the exact one, by construction: the bytes over the longest token.

Every tokenizer shipped offline is a byte-level BPE: each token stands for at most as many
bytes of the text as its longest vocabulary entry (`LONGEST_TOKEN`, read from each
tokenizer's vocabulary and special tokens; ``tests/test_tokens.py`` reads them again), so a
text of ``b`` UTF-8 bytes has at least ``ceil(b / L)`` tokens. Anthropic's tokenizer
normalises the text first (NFKC, which may shorten it: ``"ﬁ"`` is 3 bytes and 2 after it),
so its floor counts the bytes of the normalised text, as its ceiling does; its special
tokens (12 bytes at most, matched before normalisation) are far shorter than its longest
token (1,024 bytes), so a text holding some is still bounded. Framing, images and tool
schemas are counted as the exact estimator counts them (`CachedEstimator`).

`ByteFloor` is what decides "over the limit for sure" without a tokenizer
(`harness.accounting.counted_near_limit`): a request whose floor is over its limit needs no
exact count to be refused or compacted. It is weak (o200k packs 3-5 bytes a token in
English, its longest token is 128 bytes) and meant only for requests far over their limit.
"""

from __future__ import annotations

import unicodedata
from functools import cache

from harness.tokens._count_cache import CachedEstimator

LONGEST_TOKEN: dict[str, int] = {
    "tiktoken:o200k_base": 128,
    "tiktoken:cl100k_base": 128,
    "tokenizers:deepseek": 128,
    "tokenizers:anthropic": 1024,
}
"""The UTF-8 bytes of each exact method's longest token (vocabulary and special tokens)."""


class ByteFloor(CachedEstimator):
    """Counts ``ceil(bytes / longest token)`` (after NFKC where the tokenizer normalises): ≤ exact.

    Not an estimate (it is a twentieth to a fortieth of the exact count on English): a lower
    bound for deciding "over for sure" without a tokenizer. Its ``floor`` (count ÷ exact)
    is not bounded below; it is never used as an estimate.
    """

    exact = False
    floor = 1.0 / 1024

    def __init__(self, exact_method: str, images: str, *, nfkc: bool) -> None:
        method = f"floor:bytes:{exact_method}"
        super().__init__(shared_as=f"{method}:{images}")
        self.method = method
        self.images = images
        self.longest = LONGEST_TOKEN[exact_method]
        self._nfkc = nfkc

    def count(self, text: str) -> int:
        """Return the fewest tokens ``text`` can have: its bytes over the longest token's."""
        if text.isascii():  # O(1): CPython keeps the flag on the string
            size = len(text)
        else:
            if self._nfkc and not unicodedata.is_normalized("NFKC", text):
                text = unicodedata.normalize("NFKC", text)
            size = len(text.encode("utf-8", "surrogatepass"))
        return -(-size // self.longest)


@cache
def byte_floor(exact_method: str, images: str) -> ByteFloor | None:
    """Return the process-wide floor of ``exact_method``, ``None`` when its longest token is unknown."""
    if exact_method not in LONGEST_TOKEN:
        return None
    return ByteFloor(exact_method, images, nfkc=exact_method == "tokenizers:anthropic")
