"""Which estimator a model gets: its tokenizer family, and one default estimator per family.

`family_for` maps a model name to o200k, cl100k, anthropic, deepseek or `UNKNOWN_FAMILY`;
`estimator_for` hands out the family's approximate estimator (one per family and process:
`approximate`), its exact one on request, and `BoundEstimator` for a model with no offline
tokenizer.
"""

from __future__ import annotations

from functools import cache

from harness.tokens._approximate import ApproximateEstimator
from harness.tokens._bound_estimator import BoundEstimator
from harness.tokens._estimator import TokenEstimator
from harness.tokens._exact_tokens import exact_for_family

UNKNOWN_FAMILY = "unknown"
"""What `family_for` returns for a model whose tokenizer is not shipped offline."""


def family_for(model: str) -> str:
    """Return the tokenizer family of ``model``, or `UNKNOWN_FAMILY`.

    OpenAI models (``gpt-*``, ``o1``/``o3``/``o4``, ``chatgpt``, ``text-embedding``) map to
    o200k or cl100k, Claude to anthropic, DeepSeek to deepseek; anything else (Gemini, Llama,
    Mistral, Qwen, local models …) is unknown and gets `BoundEstimator`.
    """
    full = model.lower()
    name = full.rsplit("/", 1)[-1]
    if "claude" in name or full.startswith(("anthropic/", "bedrock/anthropic")):
        return "anthropic"
    if "deepseek" in full:
        return "deepseek"
    if name.startswith(("gpt-3.5", "gpt-4-", "text-embedding")) or name == "gpt-4":
        return "cl100k"
    if name.startswith(("gpt-", "chatgpt", "o1", "o3", "o4", "omni-moderation")):
        return "o200k"
    if full == "scripted":  # providers.ScriptedModel, the offline model, counts like o200k
        return "o200k"
    return UNKNOWN_FAMILY


@cache
def approximate(family: str = "o200k") -> ApproximateEstimator:
    """Return the fast approximate estimator (the default) for a tokenizer family.

    One instance per family and process: building one takes about a millisecond (its tables),
    and its counts are shared anyway (`CountCache`), so an agent or a stateless call per
    request does not pay for it each time. Construct `ApproximateEstimator` for your own.
    """
    if family == UNKNOWN_FAMILY:
        return BoundEstimator()
    return ApproximateEstimator(family)


def estimator_for(model: str, *, exact: bool = False) -> TokenEstimator:
    """Return the estimator for ``model``.

    Approximate (calibrated to its family) by default, the family's exact one with
    ``exact=True``; a model with no offline tokenizer gets `BoundEstimator` either way.
    """
    family = family_for(model)
    if exact and family != UNKNOWN_FAMILY:
        return exact_for_family(family)
    return approximate(family)
