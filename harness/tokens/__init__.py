"""Token estimation: a fast approximate default, exact tokenizers and a conservative bound.

The public face of token counting: every name the library, its benchmarks and its tests
import from here. Each concern lives in a private module of its own:

- ``_estimator``: the `TokenEstimator` protocol, the framing of messages, tool calls
  and tool schemas (`MESSAGE_OVERHEAD` …) and `message_key`, the content key of a count.
- ``_count_cache``: the process-wide count caches (`CountCache`, one per counting method,
  keyed by content, never by id alone) and `CachedEstimator`, the base class counting
  messages, tools and blocks through them: a round costs O(new content).
- ``_approximate``: `ApproximateEstimator`, the default — a linear model with non-negative
  weights read with C-speed primitives only, about as costly as two copies of the text;
  its weights and CJK rarity in ``_weights``, the text shapes it corrects for (runs,
  dense ASCII, repeated units) in ``_text_shapes``, the fitted tables in
  ``_fitted_coefficients`` (written by ``benchmarks/fit_estimator.py``).
- ``_exact_tokens``: `ExactEstimator` over tiktoken and ``tokenizers`` with the files
  litellm ships, never downloaded, imported on first use.
- ``_ceiling``: `ByteCeiling`, a count never below the exact one (the UTF-8 bytes,
  after NFKC for Anthropic): what decides "fits for sure" without a tokenizer.
- ``_floor``: `ByteFloor`, a count never above the exact one (the UTF-8 bytes over the
  family's longest token): what decides "over for sure" without a tokenizer.
- ``_bound_estimator``: `BoundEstimator` (``bound:unknown``) for models with no offline
  tokenizer: at least every known family's exact count.
- ``_images``: each provider's image rule, read from the image's header.
- ``_families``: a model's tokenizer family and its estimator (`estimator_for`).

**The ceiling and the floor.** A request fits for sure when its ceiling (`ByteCeiling`: its
UTF-8 bytes, never below its exact tokens for a byte-level tokenizer) is within its limit;
anywhere else a caller recounts with ``exact_counter`` (one shared, lazily loaded exact
estimator per family). ``floor`` is what the estimate is, at least, of the exact count on
generated text of every shape we know, measured out of sample (`benchmarks.shapes`): a
statistic (and the margin of estimators without a ceiling), not a proof. Exact estimators
have ``floor = 1``.
"""

from __future__ import annotations

from harness.tokens._approximate import ApproximateEstimator
from harness.tokens._bound_estimator import BoundEstimator, bound_coefficients
from harness.tokens._ceiling import ByteCeiling, byte_ceiling
from harness.tokens._count_cache import (
    CACHE_LIMIT,
    MAX_NAME,
    CachedEstimator,
    CountCache,
    clear_count_caches,
    remember,
    shared_cache,
)
from harness.tokens._estimator import (
    MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TOOL_SCHEMA_OVERHEAD,
    TokenEstimator,
    message_key,
)
from harness.tokens._exact_tokens import (
    EXACT_METHODS,
    FAMILIES,
    RELEASE_GIL_CHARS,
    ExactEstimator,
    LazyLength,
    exact_for_family,
    litellm_tokenizer_dir,
    shared_exact,
    tiktoken_encoding,
)
from harness.tokens._exact_tokens import _tiktoken_len as _tiktoken_len
from harness.tokens._families import UNKNOWN_FAMILY, approximate, estimator_for, family_for
from harness.tokens._fitted_coefficients import FAMILY_COEFFICIENTS, FAMILY_FLOOR
from harness.tokens._floor import LONGEST_TOKEN, ByteFloor, byte_floor
from harness.tokens._images import (
    ANTHROPIC_MAX_IMAGE,
    IMAGE_BOUND,
    OPENAI_LOW_DETAIL,
    OPENAI_MAX_IMAGE,
    OPENAI_TILE,
    anthropic_image_tokens,
    image_rule,
    image_size,
    image_tokens,
    openai_image_tokens,
)
from harness.tokens._text_shapes import _STRIDE as _STRIDE
from harness.tokens._text_shapes import (
    PERIOD_MAX,
    RUN_BLOCK,
    RUN_CHARS,
    RUN_LONG,
    RUN_MIN_TEXT,
    dense_features,
    period,
    periodic_tokens,
)
from harness.tokens._text_shapes import _run_savings as _run_savings
from harness.tokens._weights import Coefficients, pack_cjk, rare_cjk_count

__all__ = [
    "ANTHROPIC_MAX_IMAGE",
    "CACHE_LIMIT",
    "EXACT_METHODS",
    "FAMILIES",
    "FAMILY_COEFFICIENTS",
    "FAMILY_FLOOR",
    "IMAGE_BOUND",
    "LONGEST_TOKEN",
    "MAX_NAME",
    "MESSAGE_OVERHEAD",
    "OPENAI_LOW_DETAIL",
    "OPENAI_MAX_IMAGE",
    "OPENAI_TILE",
    "PERIOD_MAX",
    "RELEASE_GIL_CHARS",
    "RUN_BLOCK",
    "RUN_CHARS",
    "RUN_LONG",
    "RUN_MIN_TEXT",
    "TOOL_CALL_OVERHEAD",
    "TOOL_SCHEMA_OVERHEAD",
    "UNKNOWN_FAMILY",
    "ApproximateEstimator",
    "BoundEstimator",
    "ByteCeiling",
    "ByteFloor",
    "CachedEstimator",
    "Coefficients",
    "CountCache",
    "ExactEstimator",
    "LazyLength",
    "TokenEstimator",
    "anthropic_image_tokens",
    "approximate",
    "bound_coefficients",
    "byte_ceiling",
    "byte_floor",
    "clear_count_caches",
    "dense_features",
    "estimator_for",
    "exact_for_family",
    "family_for",
    "image_rule",
    "image_size",
    "image_tokens",
    "litellm_tokenizer_dir",
    "message_key",
    "openai_image_tokens",
    "pack_cjk",
    "period",
    "periodic_tokens",
    "rare_cjk_count",
    "remember",
    "shared_cache",
    "shared_exact",
    "tiktoken_encoding",
]
