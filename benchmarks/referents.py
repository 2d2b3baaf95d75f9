"""Availability: is what the agent's next action refers to still in the request it was sent?

The fidelity benchmark (`benchmarks.bench_fidelity`) asks this of every strategy. A
*referent* is a token of the recorded agent's next action (its tool calls' arguments, or its
text when it called no tool) that names something precise: a path, an identifier with ``_``
or an inner capital, a dotted name, a number of three or more digits, a hex hash, a quoted
string. Of those that appeared earlier in the same run (and not in the system prompt, which
every strategy keeps), the share found verbatim in the request is the request's
availability; those last seen more than `FAR_TOKENS` tokens before the request are also
scored apart (far back), since they are the ones compaction decides about.

Generated runs rarely repeat a referent, so `plant_facts` plants some: a fact line in an
early tool output that a later tool call quotes back — what a strategy that drops it loses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import msgspec

from harness.messages import Message
from harness.request import ModelRequest

FAR_TOKENS = 2_000
"""A referent last seen more than this many tokens before the request is "far back"."""

_PATTERNS = (
    re.compile(r"(?:[\w.-]+/)+[\w.-]+"),  # paths
    re.compile(r"\b[\w-]+\.(?:py|pyi|txt|md|rst|json|cfg|toml|ya?ml|ini|js|ts|c|h|sh|log)\b"),
    re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b"),  # dotted names
    re.compile(r"\b[A-Za-z]*_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b"),  # identifiers
    _HASH := re.compile(r"\b[0-9a-f]{7,40}\b"),  # hashes (a digit and a letter, below)
    re.compile(r"(?<![\w.])\d{3,}(?:\.\d+)?(?![\w.])|(?<![\w.])\d+\.\d+(?![\w.])"),  # numbers
)
_QUOTED = re.compile(r"\"([^\"\n]{3,80})\"|'([^'\n]{3,80})'")
MIN_CHARS = 4
"""Shorter tokens (``a_b``, ``x.y``) are too common to tell a strategy apart."""


def referents(text: str) -> set[str]:
    """Return the precise tokens of ``text``: paths, identifiers, numbers, hashes, quotes."""
    found: set[str] = set()
    for pattern in _PATTERNS:
        for match in pattern.finditer(text):
            token = match.group(0).strip(".-/")
            if len(token) < MIN_CHARS and not token.isdigit():
                continue
            if pattern is _HASH and (token.isdigit() or token.isalpha()):
                continue  # a hash has digits and letters; "decade" and "1234567" are not one
            found.add(token)
    for match in _QUOTED.finditer(text):
        token = (match.group(1) or match.group(2) or "").strip()
        if len(token) >= MIN_CHARS:
            found.add(token)
    return found


def action_text(message: Message) -> str:
    """Return what an assistant message *does*: its calls' string arguments, else its text."""
    if not message.tool_calls:
        return message.text
    parts: list[str] = []
    for call in message.tool_calls:
        try:
            value = json.loads(call.arguments or "{}")
        except ValueError:
            parts.append(call.arguments)
            continue
        parts.extend(_strings(value))
    return "\n".join(parts)


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


def message_text(message: Message) -> str:
    """Return a message's text with its tool calls' arguments (what a referent is found in)."""
    if not message.tool_calls:
        return message.text
    return "\n".join([message.text, *(c.arguments for c in message.tool_calls)])


@dataclass(frozen=True)
class Need:
    """What the recorded action at one request point refers to that the run showed before."""

    point: int
    """The index of the assistant message the request comes before."""
    referents: tuple[str, ...]
    far: tuple[str, ...]
    """Those last seen more than `FAR_TOKENS` tokens before the request."""


def needs(
    messages: Sequence[Message],
    points: Sequence[int],
    runs: Sequence[int],
    count: Callable[[Message], int],
    *,
    system: str = "",
) -> dict[int, Need]:
    """Return, per request point, the referents its action uses that its run showed earlier.

    Args:
        messages: the replayed session.
        points: the request points (indices of the recorded replies).
        runs: per message, the index of the run it belongs to (referents count only when
            the same run showed them before: the recorded agent saw nothing else).
        count: a message's token count (for "far back").
        system: the system prompt (its referents are left out: every strategy keeps it).
    """
    texts = [message_text(m) for m in messages]
    ends: list[int] = []  # tokens up to and including message i
    total = 0
    for m in messages:
        total += count(m)
        ends.append(total)
    out: dict[int, Need] = {}
    for point in points:
        if point >= len(messages) or messages[point].role != "assistant":
            continue
        run = runs[point]
        start = point
        while start > 0 and runs[start - 1] == run:
            start -= 1
        wanted = {r for r in referents(action_text(messages[point])) if r not in system}
        seen: list[str] = []
        far: list[str] = []
        before = ends[point - 1] if point > 0 else 0
        for ref in sorted(wanted):
            last = next((i for i in range(point - 1, start - 1, -1) if ref in texts[i]), None)
            if last is None:
                continue
            seen.append(ref)
            if before - ends[last] > FAR_TOKENS:
                far.append(ref)
        if seen:
            out[point] = Need(point, tuple(seen), tuple(far))
    return out


def request_text(messages: Sequence[Message]) -> str:
    """Return the text a request carries, for `availability` (messages and call arguments)."""
    return "\n".join(message_text(m) for m in messages)


def sent_text(request: ModelRequest) -> str:
    """Return the text of a prepared request as the provider receives it."""
    return request_text(request.render())


def availability(need: Need, text: str) -> tuple[int, int, int, int]:
    """Return (found, wanted, found far back, wanted far back) of ``need`` in ``text``."""
    found = sum(1 for r in need.referents if r in text)
    far = sum(1 for r in need.far if r in text)
    return found, len(need.referents), far, len(need.far)


# ----------------------------------------------------------------------------- planting
PLANT_EVERY = 3
"""A fact is planted in every third tool output of a generated run."""


def plant_facts(
    messages: Sequence[Message], *, run: int, every: int = PLANT_EVERY
) -> list[Message]:
    """Return ``messages`` with facts planted in tool outputs and quoted back later.

    The k-th planted tool output ends with a line naming a file, a hash and a number; the
    tool call two calls after the one answered quotes all three in a ``note`` argument, so
    the next action really uses them. Ids are kept.
    """
    out = list(messages)
    tools = [i for i, m in enumerate(out) if m.role == "tool"]
    callers = [i for i, m in enumerate(out) if m.role == "assistant" and m.tool_calls]
    for k, index in enumerate(tools[::every]):
        fact = (
            f"src/planted/run{run}_fact{k}.py",
            f"{0xA5F3C0 + 131 * (run * 50 + k):x}9e1",
            str(48_000 + 17 * (run * 50 + k)),
        )
        message = out[index]
        out[index] = message.replace(
            content=f"{message.text}\nplanted: {fact[0]} at {fact[1]} (build {fact[2]})"
        )
        later = [c for c in callers if c > index]
        if len(later) < 2:
            continue
        caller = later[1]
        target = out[caller]
        call = target.tool_calls[0]
        try:
            arguments = json.loads(call.arguments or "{}")
        except ValueError:
            arguments = {"__raw__": call.arguments}
        if not isinstance(arguments, dict):
            arguments = {"__value__": arguments}
        note = str(arguments.get("note", ""))
        arguments["note"] = f"{note} {fact[0]} {fact[1]} {fact[2]}".strip()
        new_call = msgspec.structs.replace(call, arguments=json.dumps(arguments))
        out[caller] = target.replace(tool_calls=(new_call, *target.tool_calls[1:]))
    return out
