"""Compaction's settings: one frozen value, checked when it is made."""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from harness.errors import ConfigurationError
from harness.types import ModelClient, TokenPrices
from middleware.compaction._summariser import DEFAULT_SUMMARY_PROMPT
from middleware.memory import DEFAULT_MEMORY, MemoryStore

DEFAULT_TRIGGER: Final = 0.75
"""Without ``trigger`` and ``trigger_messages``: compact when the request reaches this share of
the input limit (window-aware: a large window is not summarised every 50 messages)."""
DEFAULT_TRIGGER_MESSAGES: Final = 200
"""… or when the history holds this many messages (a secondary guard: many tiny messages)."""
COST: Final = "cost"
"""``trigger="cost"``: the cost-aware rule (`middleware.compaction._cost`)."""


class CompactionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What `middleware.compaction.Compaction` was configured with (see its arguments).

    Raises:
        ConfigurationError: when a value is out of range, ``model`` is not a model client,
            or ``summary_prompt`` lacks ``{messages}``.
    """

    trigger_messages: int | None = None
    trigger: float | int | Literal["cost"] | None = None
    keep_tokens: int | None = None
    keep_messages: int = 20
    model: ModelClient | None = None
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT
    trim_protect_tokens: int = 40_000
    trim_min_tokens: int | None = 20_000
    trim_preview_chars: int = 300
    truncate_args: bool = False
    max_arg_length: int = 2000
    truncation_text: str = "... [truncated] ..."
    summary_chunk_tokens: int | None = None
    memory: MemoryStore | None = DEFAULT_MEMORY
    compact_tool: bool = False
    in_place_summary: bool = True
    pin_first_task: bool = False
    mask_observations: int | None = None
    supersede_reads: bool = False
    summary_keeps_files: bool = False

    auto: bool = True
    prices: TokenPrices | None = None

    @property
    def cost_aware(self) -> bool:
        """Whether the cost-aware rule decides when to compact (``trigger="cost"``)."""
        return self.trigger == COST

    @property
    def message_trigger(self) -> int:
        """The message count that triggers (`DEFAULT_TRIGGER_MESSAGES` when not given)."""
        return DEFAULT_TRIGGER_MESSAGES if self.trigger_messages is None else self.trigger_messages

    @property
    def token_trigger(self) -> float | int | None:
        """The token threshold in force (``None``: only the history's budget).

        ``trigger``, or `DEFAULT_TRIGGER` when neither it nor ``trigger_messages`` was given
        — and with ``trigger="cost"``, where the prices are unknown (the fallback).
        """
        trigger = self.trigger
        if isinstance(trigger, str) or (trigger is None and self.trigger_messages is None):
            return DEFAULT_TRIGGER
        return trigger

    def __post_init__(self) -> None:
        if self.trigger_messages is not None:
            _check_int("trigger_messages", self.trigger_messages, minimum=4)
        if not isinstance(self.auto, bool):
            raise ConfigurationError(f"auto must be True or False, got {self.auto!r}")
        if self.prices is not None and not isinstance(self.prices, TokenPrices):
            raise ConfigurationError(
                f"prices must be a harness.types.TokenPrices or None, got {self.prices!r}"
            )
        if self.trigger is not None and self.trigger != COST:
            if isinstance(self.trigger, bool) or not isinstance(self.trigger, int | float):
                raise ConfigurationError(
                    "trigger must be a fraction in (0, 1], a token count, 'cost' or None, "
                    f"got {self.trigger!r}"
                )
            if isinstance(self.trigger, float) and not 0.0 < self.trigger <= 1.0:
                raise ConfigurationError(
                    f"trigger {self.trigger!r}: give a fraction of the input limit in (0, 1] "
                    "(e.g. 0.85) or an absolute token count as an int"
                )
            if isinstance(self.trigger, int) and self.trigger < 1:
                raise ConfigurationError(
                    f"trigger must be a positive token count, got {self.trigger}"
                )
        if self.keep_tokens is not None:
            _check_int("keep_tokens", self.keep_tokens, minimum=0)
        _check_int("keep_messages", self.keep_messages, minimum=1)
        if self.keep_tokens == 0 and self.keep_messages > self.message_trigger - 4:
            raise ConfigurationError(
                f"keep_messages ({self.keep_messages}) must be at most trigger_messages - 4 "
                f"({self.message_trigger - 4}) so that a compacted history (task, summary, current "
                "request, kept messages) is below the trigger; lower keep_messages or raise "
                "trigger_messages"
            )
        if self.model is not None and not (
            callable(getattr(self.model, "complete", None))
            and isinstance(getattr(self.model, "model", None), str)
        ):
            raise ConfigurationError(
                "model must be a model client with 'model' and 'async complete(request)', "
                f"got {self.model!r}"
            )
        if not isinstance(self.summary_prompt, str) or "{messages}" not in self.summary_prompt:
            raise ConfigurationError(
                "summary_prompt must contain the placeholder {messages}, where the messages "
                "to summarise are inserted; add it to your prompt"
            )
        _check_int("trim_protect_tokens", self.trim_protect_tokens, minimum=0)
        if self.trim_min_tokens is not None:
            _check_int("trim_min_tokens", self.trim_min_tokens, minimum=0)
        _check_int("trim_preview_chars", self.trim_preview_chars, minimum=0)
        _check_int("max_arg_length", self.max_arg_length, minimum=1)
        if not isinstance(self.truncation_text, str):
            raise ConfigurationError(
                f"truncation_text must be a string, got {self.truncation_text!r}"
            )
        if self.summary_chunk_tokens is not None:
            _check_int("summary_chunk_tokens", self.summary_chunk_tokens, minimum=256)
        if self.mask_observations is not None:
            _check_int("mask_observations", self.mask_observations, minimum=1)
        if not isinstance(self.supersede_reads, bool):
            raise ConfigurationError(
                f"supersede_reads must be True or False, got {self.supersede_reads!r}"
            )
        if not isinstance(self.summary_keeps_files, bool):
            raise ConfigurationError(
                f"summary_keeps_files must be True or False, got {self.summary_keeps_files!r}"
            )
        if self.memory is not None and not isinstance(self.memory, MemoryStore):
            raise ConfigurationError(
                f"memory must implement harness.memory.MemoryStore (async record(messages, "
                f"request)) or be None, got {self.memory!r}"
            )

    def replace(self, **changes: Any) -> CompactionSettings:
        """Return a copy with ``changes`` applied (and checked)."""
        return msgspec.structs.replace(self, **changes)


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an int ≥ {minimum}, got {value!r}")
