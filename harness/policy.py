"""The context policy: the input budget, the token estimator and the manifest observer."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from harness.errors import ConfigurationError
from harness.manifest import Transform, TransformKind

if TYPE_CHECKING:
    from harness.manifest import ContextManifest
    from harness.tokens import TokenEstimator

DEFAULT_INPUT_TOKENS = 64_000
"""The input budget when neither the policy nor the model says otherwise."""

WINDOW_GUESSED: Final = TransformKind("input_limit_guessed")
"""The transform (``input_limit_guessed:<limit>``) on a request whose window was unknown."""

logger = logging.getLogger("harness.policy")

OUTPUT_SETTINGS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
"""Request settings that cap the answer's length (OpenAI's new and old names, Gemini's)."""


def requested_output(settings: Mapping[str, Any] | None) -> int | None:
    """Return the output tokens a request's settings ask for, or ``None`` when they do not.

    Reads ``max_completion_tokens``, ``max_tokens`` and ``max_output_tokens``; when more
    than one is set, the largest counts (the provider may honour any of them). Values that
    are not positive ints are ignored (the provider rejects them on its own).

    Args:
        settings: the request's provider settings (``ModelRequest.settings``).
    """
    if not settings:
        return None
    found = [
        value
        for key in OUTPUT_SETTINGS
        if isinstance(value := settings.get(key), int) and not isinstance(value, bool) and value > 0
    ]
    return max(found) if found else None


class ContextPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """How large a request may be, how it is counted, and who hears about it.

    The effective input limit is ``max_input_tokens`` when given, bounded by the model's
    window minus the output reserve and the safety margin; with no explicit maximum it is
    that window arithmetic, and 64,000 tokens when the window is unknown. The output
    reserve is the request's own ``max_tokens`` / ``max_completion_tokens`` when it sets
    one (the provider refuses input plus requested output over the window), else
    ``reserve_output``. Both reserves scale down with a small window: at most
    ``output_fraction`` and ``margin_fraction`` of it (`output_reserve`, `margin`), so a
    2,000-token model keeps 500 + 250 tokens free instead of refusing every request; from a
    16,384-token window up they are the plain numbers.
    """

    max_input_tokens: int | None = None
    """An explicit input cap in tokens (``None``: derive from the model's window)."""
    reserve_output: int = 4096
    """Tokens kept free for the model's answer when the request does not set ``max_tokens``
    (at most ``output_fraction`` of the window)."""
    safety_margin: int = 1024
    """Tokens kept free for estimation error (at most ``margin_fraction`` of the window)."""
    output_fraction: float = 0.25
    """The largest share of the window ``reserve_output`` takes (``1.0``: never scaled)."""
    margin_fraction: float = 0.125
    """The largest share of the window ``safety_margin`` takes (``1.0``: never scaled)."""
    min_window: int = 1_000
    """Windows smaller than this are refused up front, before anything is sent: the default
    stack's System, tool schemas, summary prompt and one turn do not fit in less (``0``:
    never refused; with a lean stack of your own)."""
    estimator: TokenEstimator | None = None
    """The token estimator (``None``: `estimator_for(model)` at resolution)."""
    observer: Callable[[ContextManifest], None] | None = None
    """Called with every manifest, on success and on failure; must return quickly."""
    calibrate: bool = False
    """Correct estimates with the provider's reported prompt tokens (per model, bounded)."""

    def __post_init__(self) -> None:
        for name in ("reserve_output", "safety_margin", "min_window"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"ContextPolicy.{name} must be an int ≥ 0, got {value!r}")
        for name in ("output_fraction", "margin_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
                raise ConfigurationError(
                    f"ContextPolicy.{name} must be a fraction of the window in (0, 1], "
                    f"got {value!r}"
                )
        if self.max_input_tokens is not None and (
            not isinstance(self.max_input_tokens, int) or self.max_input_tokens <= 0
        ):
            raise ConfigurationError(
                f"ContextPolicy.max_input_tokens must be a positive int or None, "
                f"got {self.max_input_tokens!r}"
            )

    def replace(self, **changes: Any) -> ContextPolicy:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)

    def output_reserve(self, window: int | None) -> int:
        """Return the output reserve for ``window``: ``reserve_output``, scaled to a small one."""
        if window is None or window <= 0:
            return self.reserve_output
        return min(self.reserve_output, int(window * self.output_fraction))

    def margin(self, window: int | None) -> int:
        """Return the safety margin for ``window``: ``safety_margin``, scaled to a small one."""
        if window is None or window <= 0:
            return self.safety_margin
        return min(self.safety_margin, int(window * self.margin_fraction))

    def input_limit(self, window: int | None, *, max_output: int | None = None) -> int:
        """Return the input budget for a model whose context window is ``window``.

        Args:
            window: the model's context window in tokens, ``None`` when unknown.
            max_output: the output tokens the request asks for (its ``max_tokens`` /
                ``max_completion_tokens``, see `requested_output`); it replaces
                ``reserve_output`` as the reserve when given.

        Raises:
            ConfigurationError: when the reserves leave no room for input.
        """
        if max_output is not None and (
            not isinstance(max_output, int) or isinstance(max_output, bool) or max_output <= 0
        ):
            raise ConfigurationError(
                f"max_output must be a positive int or None, got {max_output!r}"
            )
        derived = None
        if window is not None and 0 < window < self.min_window:
            raise ConfigurationError(
                f"the model's window ({window:,} tokens) is smaller than "
                f"ContextPolicy.min_window ({self.min_window:,}): the default stack's System, "
                "tool schemas, summary prompt and one turn do not fit in it. Use a model with a "
                "larger window, or lower ContextPolicy.min_window with a leaner stack"
            )
        if window is not None and window > 0:
            reserve = self.output_reserve(window) if max_output is None else max_output
            margin = self.margin(window)
            derived = window - reserve - margin
            if derived <= 0:
                named = (
                    f"reserve_output ({reserve})"
                    if max_output is None
                    else f"the requested max_tokens ({reserve})"
                )
                raise ConfigurationError(
                    f"the model's window ({window} tokens) is smaller than {named} + "
                    f"safety_margin ({margin}); lower them"
                )
        if self.max_input_tokens is not None:
            return (
                min(self.max_input_tokens, derived)
                if derived is not None
                else self.max_input_tokens
            )
        return derived if derived is not None else DEFAULT_INPUT_TOKENS

    def resolve(self, model: str) -> ContextPolicy:
        """Return this policy with an estimator chosen for ``model`` when none was given."""
        if self.estimator is not None:
            return self
        from harness.tokens import estimator_for

        return self.replace(estimator=estimator_for(model))


class _WindowClient(Protocol):
    def context_window(self, model: str | None = None) -> int | None: ...


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


async def discovered_input_limit(
    policy: ContextPolicy, client: _WindowClient, model: str, *, max_output: int | None = None
) -> tuple[int, tuple[Transform, ...]]:
    """Return the input budget for ``model`` on ``client`` and the transforms to record.

    The client is asked to discover the window first when it can
    (`harness.types.DiscoversWindow`: a server's metadata, once per process). When the
    window stays unknown and the policy sets no ``max_input_tokens``, the budget is the
    64,000-token default: a warning is logged once per (api_base, model) naming what to
    set, and the transform ``input_limit_guessed:<limit>`` marks the request's manifest.

    Args:
        policy: the request's policy.
        client: the model client that will send the request.
        model: the model name.
        max_output: as for `ContextPolicy.input_limit`.

    Raises:
        ConfigurationError: when the reserves leave no room for input.
    """
    discover = getattr(client, "discover_context_window", None)
    window = await discover(model) if callable(discover) else client.context_window(model)
    limit = policy.input_limit(window, max_output=max_output)
    if window is not None or policy.max_input_tokens is not None:
        return limit, ()
    _warn_unknown_window(model, str(getattr(client, "api_base", None) or ""), limit)
    return limit, (Transform(WINDOW_GUESSED, limit),)


def _warn_unknown_window(model: str, api_base: str, limit: int) -> None:
    with _warned_lock:
        if (api_base, model) in _warned:
            return
        _warned.add((api_base, model))
    where = f" at {api_base}" if api_base else ""
    logger.warning(
        "the context window of model %r%s is unknown (litellm's model map does not list it "
        "and the server's metadata does not say), so the input budget is a guess of %s "
        "tokens and requests may overflow. Set ContextPolicy(max_input_tokens=...) or "
        "LiteLLMClient(..., context_window=...) (the drop-in takes context_window=), or "
        "register the model with litellm.register_model.",
        model,
        where,
        f"{limit:,}",
    )


def forget_window_warnings() -> None:
    """Let every unknown window warn again (for tests; the warning is once per process)."""
    with _warned_lock:
        _warned.clear()
