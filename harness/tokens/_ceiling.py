"""A count that is never below the exact one, by construction: the text's UTF-8 bytes.

Every tokenizer with a file shipped offline (tiktoken's ``o200k_base`` and ``cl100k_base``,
DeepSeek's and Anthropic's ``tokenizers`` files) is a byte-level BPE: each token stands for
one byte or more of the text it encodes, so a text has at most as many tokens as bytes.
Anthropic's tokenizer first normalises the text (NFKC, which can lengthen it: ``"﷽"`` is 3
bytes and 33 after it), so its ceiling counts the bytes of the normalised text. Framing,
images and tool schemas are counted as the exact estimator counts them (`CachedEstimator`),
so a message's, a block's or a request's ceiling is at least its exact count whatever the
script, language or encoding — no text class was fitted or thought of.

`ByteCeiling` is what decides "fits for sure" without a tokenizer
(`harness.accounting.counted_near_limit`): a request whose ceiling is within its limit fits;
any other is counted exactly. ASCII text costs nothing to bound (its length), other text one
encoding; counts are cached per message like every estimator's.
"""

from __future__ import annotations

import unicodedata
from functools import cache

from harness.tokens._count_cache import CachedEstimator


class ByteCeiling(CachedEstimator):
    """Counts a text's UTF-8 bytes (after NFKC where the tokenizer normalises): ≥ exact.

    Not an estimate (it is 3-5x the exact count on English): an upper bound for deciding
    without a tokenizer. ``floor`` is 1.0 because its count is never below the exact one.
    """

    exact = False
    floor = 1.0

    def __init__(self, exact_method: str, images: str, *, nfkc: bool) -> None:
        method = f"ceiling:bytes:{exact_method}"
        super().__init__(shared_as=f"{method}:{images}")
        self.method = method
        self.images = images
        self._nfkc = nfkc

    def count(self, text: str) -> int:
        """Return the UTF-8 bytes of ``text`` (normalised first when the tokenizer does)."""
        if text.isascii():  # O(1): CPython keeps the flag on the string
            return len(text)
        if self._nfkc and not unicodedata.is_normalized("NFKC", text):
            text = unicodedata.normalize("NFKC", text)
        return len(text.encode("utf-8", "surrogatepass"))


@cache
def byte_ceiling(exact_method: str, images: str) -> ByteCeiling:
    """Return the process-wide ceiling of the exact counting method ``exact_method``."""
    return ByteCeiling(exact_method, images, nfkc=exact_method == "tokenizers:anthropic")
