"""Secrets out of everything the harness stores: API keys, tokens, passwords, credentials, keys.

One set of patterns (`DEFAULT_SECRETS`, configurable) serves every writer: fragment writes
(`harness.fragments.FragmentPolicy`) and the session recorder (every message, summary,
rewritten copy, warning and error on its way to the store). The secret part of a match becomes
``[REDACTED:<name>]`` and what names it stays (``DB_PASSWORD=[REDACTED:password]``,
``postgres://app:[REDACTED:url_credentials]@db``).

Where the shapes come from:

- vendor tokens (AWS, Slack, Stripe, GitHub, GitLab, JWT, npm, PyPI, SendGrid, Twilio, …) are
  the regular expressions of `detect-secrets`' plugins, taken from the installed library when
  the first text is redacted (``SecretPattern.detector``). Its line scanner is not used: it
  costs ~600 ms for an 80,000-character tool result and reports thousands of candidates
  there; our driver runs each plugin regex once over the text (or only over the lines that
  hold one of its hints) and widens a fixed-length match to the whole token, so a longer
  token of the same vendor leaves no tail in clear;
- the shapes it lacks or misses: generic ``sk-…`` keys, ``github_pat_…``, Google keys,
  Stripe test keys, bearer and ``Authorization:`` credentials, credentials in URLs, PEM
  private-key blocks, and assignments (``KEY=value``, ``"key": "value"``, ``key: value``,
  ``--key value``) whose name holds a secret word (password, secret, token, api key,
  credential, 密码, …) — with ASCII word boundaries, so ``DB_PASSWORD``, ``id_token`` and a key
  right after Chinese text count, and full-width ``：`` / ``＝`` separators;
- any other assignment whose value is a long random-looking string (Shannon entropy,
  ``SecretPattern.min_entropy``): git hashes, UUIDs, paths and identifiers stay.

Redaction runs on every stored message, so it is built to be cheap on ordinary text: a pattern
with ``hints`` runs only on the lines that contain one of them, and before any pattern runs, C-level
``str`` membership tests reject the patterns that cannot match (``_Gates``: a pattern's hints,
or a literal piece every match of its regular expression holds, derived from the expression) —
ordinary text pays a few substring searches, not a regex pass per pattern. Texts already redacted
are remembered (`CACHE_CHARS` of them, least recently used out first), keyed by the pattern set:
a session's messages are redacted again when it is recorded, rewritten or exported.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import msgspec

from harness.errors import ConfigurationError
from harness.messages import Message


class SecretPattern(msgspec.Struct, frozen=True):
    """A secret to redact: a name and a regular expression (or a `detect-secrets` plugin).

    The secret part of each match — the whole match, or the group named by ``group`` — is
    replaced by ``[REDACTED:<name>]``. A pattern with a group named ``keep`` replaces what
    follows that group (``password=[REDACTED:password]``).

    ``hints`` make redaction cheap: a regular expression that cannot start with a literal
    scans every position of the text (tens of milliseconds for an 80,000-character tool
    result), so a pattern with hints runs only on the lines that contain one of them
    (case-insensitively) — each of its matches must then lie within one line.
    """

    name: str
    pattern: str = ""
    """A regular expression (unused when ``detector`` is set)."""
    hints: tuple[str, ...] = ()
    """Literal pieces, one of which every match contains (``()``: run on the whole text)."""
    group: int | str = 0
    """The group that is the secret (``0``: the whole match); a regular expression without
    that group is replaced whole."""
    detector: str = ""
    """A `detect-secrets` plugin whose regular expressions are used, as ``module:Class`` of
    ``detect_secrets.plugins`` (``"slack:SlackDetector"``); imported on first use."""
    widen: str = ""
    """Characters (a regex character-class body, ``"A-Za-z0-9_-"``) over which the replaced
    part is extended on both sides: a fixed-length pattern then takes the whole token."""
    anchored: bool = False
    """Every match starts at one of the ``hints``: the regular expression is tried only there
    (one attempt per hint found, whatever the length of the line)."""
    min_entropy: float = 0.0
    """Redact only a secret part that looks random: its Shannon entropy per character,
    divided by ``log2(min(len, 64))`` (1.0: every character different), at least this, with
    at least two of lower case, upper case and digits (``0``: no check)."""
    screen: str = ""
    """A cheaper regular expression that matches wherever the pattern does (a necessary
    condition, no more): the pattern then runs only on the lines the screen finds a match in —
    each of its matches must lie within one line (``""``: no screen)."""


_TOKEN: Final = "A-Za-z0-9_\\-"
"""The characters of a vendor token, over which a fixed-length match is widened."""

_SECRET_WORD: Final = (
    r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_\-]?key|access[_\-]?key|private[_\-]?key"
    r"|auth|credentials?|密码|口令|密钥|令牌"
)
"""Words that make an assignment's value a secret (as one segment of its name)."""

_NOT_SECRET_END: Final = "".join(
    f"(?<!{end})"
    for end in (
        "count", "type", "name", "len", "length", "size", "limit", "url", "uri", "file",
        "path", "dir", "endpoint", "header", "field", "expiry", "expires", "format",
        "method", "mode", "policy", "provider", "usage", "prompt", "label", "hint", "min",
        "max", "ttl", "_id", "ids",
    )
)  # fmt: skip
"""Names that end so describe a secret (``token_count``, ``password_file``), not hold one."""

_CODE_VALUE: Final = (
    r"(?!(?:None|null|nil|true|false|True|False|undefined|str|bytes|int|bool|string|Optional"
    r"|Any|SecretStr)(?![A-Za-z0-9_]))"
    r"(?!self\.|cls\.|this\.|os\.|env\.|process\.env|\$|%\(|\*\*\*|\.{0,2}/|~/)"
    r"(?![a-z][a-z0-9]*_[a-z0-9_]*(?![A-Za-z0-9.\-]))"
    r"(?![A-Z][a-z]+(?:[A-Z][a-z0-9]*)+(?![A-Za-z0-9_.\-]))"
    r"(?![A-Za-z_]*(?i:key|token|secret|passw|pwd|auth|credential)[A-Za-z_]*(?![A-Za-z0-9.\-]))"
    r"(?![A-Za-z_]+(?:\.[A-Za-z_]+)+(?![A-Za-z0-9\-]))"
)
"""An unquoted value that is code is not a secret: a literal or type name, an attribute
(``args.api_key``), a variable or path reference, a snake_case or CamelCase name, a name holding a secret word
(``api_key=api_key``). A password spelled like one of them is not redacted."""


def _value(guard: str = "") -> str:
    """An assignment's value, as a regular expression with a group named ``secret``.

    The value is quoted (ASCII, curly or corner quotes), or runs up to a delimiter, a CJK
    character or full-width punctuation (a secret right before Chinese text ends there).
    ``guard`` is a condition on what follows an unquoted value.
    """
    return (
        r"(?P<q>\\?[\"'`]|“|「)?"
        r"(?P<secret>(?(q)[^\"'`”」\\\n]+"
        r"|" + _CODE_VALUE + r"[^\s\"'`,;&<>()\[\]{}\\\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]++"
        r"(?![(\[])" + guard + "))"
        r"(?(q)\\?[\"'`”」])"
    )


_ASSIGNED: Final = (
    r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z]))(?i:" + _SECRET_WORD + r")"
    r"(?![a-z])(?![sS](?![A-Za-z0-9]))(?!(?!Key|Value|Hash|Str|String|Text)[A-Z][a-z])"
    r"[A-Za-z0-9_\-]*" + _NOT_SECRET_END + r"(?:\\?[\"'`]\]?)?[ \t\u3000]*"
    r"(?:[=:：＝](?!=)|:=|=>)(?P<sp>[ \t\u3000]+)?" + _value(r"(?(sp)(?![ \t]+[A-Za-z(]))")
)
"""``<name holding a secret word> <separator> <value>``: the secret word is a segment of the
name (``DB_PASSWORD``, ``id_token``, ``clientSecret``; not ``max_tokens``, ``SecretPattern``),
the name does not end as a description (``token_count``); after a separator and a space, a
value followed by more words is prose (``api_key: the provider's key``), not a secret."""

_ASSIGNED_HINTS: Final = (
    *("pass", "pwd", "secret", "token", "api", "access", "private", "auth", "credential"),
    *("密码", "口令", "密钥", "令牌"),
)
"""Where a secret word of `_ASSIGNED` can start (its match starts there: anchored)."""

DEFAULT_SECRETS: Final = (
    SecretPattern(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    SecretPattern(
        "bearer",
        r"(?i)(?<![A-Za-z0-9])(?:bearer|authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:basic|token)?)"
        r"[ \t]+(?P<secret>[A-Za-z0-9._~+/\-]{8,}=*)",
        ("bearer", "authorization"),
        group="secret",
    ),
    # Vendor tokens: detect-secrets' plugin regexes. Those that start with a literal need no
    # hints (the regex engine finds the literal as fast as str.find).
    SecretPattern(
        "aws_key",
        detector="aws:AWSKeyDetector",
        hints=("akia", "asia", "abia", "acca", "a3t", "aws"),
        group=1,
        widen=_TOKEN,
    ),
    SecretPattern(
        "slack_token", detector="slack:SlackDetector", hints=("xox", "hooks.slack"), widen=_TOKEN
    ),
    SecretPattern("stripe_key", detector="stripe:StripeDetector", hints=("k_live_",), widen=_TOKEN),
    SecretPattern("github_token", detector="github_token:GitHubTokenDetector", widen=_TOKEN),
    SecretPattern("gitlab_token", detector="gitlab_token:GitLabTokenDetector", widen=_TOKEN),
    SecretPattern("jwt", detector="jwt:JwtTokenDetector", widen=_TOKEN + ".+/="),
    SecretPattern("openai_key", detector="openai:OpenAIDetector", widen=_TOKEN),
    SecretPattern("pypi_token", detector="pypi_token:PypiTokenDetector", widen=_TOKEN),
    SecretPattern("sendgrid_key", detector="sendgrid:SendGridDetector", widen=_TOKEN),
    SecretPattern("npm_token", detector="npm:NpmDetector", hints=("_authtoken",), group=1),
    SecretPattern("azure_key", detector="azure_storage_key:AzureStorageKeyDetector"),
    SecretPattern("square_token", detector="square_oauth:SquareOAuthDetector", widen=_TOKEN),
    SecretPattern("mailchimp_key", detector="mailchimp:MailchimpDetector", hints=("-us",)),
    SecretPattern("twilio_key", detector="twilio:TwilioKeyDetector", widen=_TOKEN),
    # What detect-secrets lacks, or misses in agent text.
    SecretPattern("api_key", r"sk-(?<![A-Za-z0-9]sk-)[A-Za-z0-9_\-]{16,}"),
    SecretPattern(
        "github_token", r"github_pat_(?<![A-Za-z0-9]github_pat_)[A-Za-z0-9_]{22,}", widen=_TOKEN
    ),
    SecretPattern("npm_token", r"npm_(?<![A-Za-z0-9]npm_)[A-Za-z0-9]{36}", widen=_TOKEN),
    SecretPattern("huggingface_token", r"hf_(?<![A-Za-z0-9]hf_)[A-Za-z0-9]{30,}"),
    SecretPattern(
        "google_key",
        r"(?<![A-Za-z0-9])(?:AIza[0-9A-Za-z_\-]{35}|ya29\.[0-9A-Za-z_\-]{20,})",
        ("aiza", "ya29."),
        widen=_TOKEN,
    ),
    SecretPattern(
        "stripe_key",
        r"(?<![A-Za-z0-9])[rs]k_(?:live|test)_[0-9A-Za-z]{16,}",
        ("k_live_", "k_test_"),
        widen=_TOKEN,
    ),
    SecretPattern(
        "url_credentials",
        r"://[^\s:/?#@\"'<>]*:(?P<secret>[^\s/?#\"'<>]+)@",
        ("://",),
        group="secret",
    ),
    SecretPattern(
        "password",
        r"(?<![A-Za-z0-9])--(?:[A-Za-z0-9]+-)*(?i:pass(?:word)?|token|secret|api-key|access-key)"
        r"(?![A-Za-z0-9\-])[ \t]+" + _value(),
        ("--",),
        group="secret",
        anchored=True,
    ),
    SecretPattern(
        "password",
        _ASSIGNED,
        _ASSIGNED_HINTS,
        group="secret",
        anchored=True,
    ),
    SecretPattern(
        "high_entropy",
        r"[=:：＝]>?[ \t]*(?:\\?[\"'`])?"
        r"(?P<secret>(?=[A-Za-z+_\-]*[0-9])[A-Za-z0-9+_\-]{20,}={0,2})"
        r"(?![A-Za-z0-9+/_\-=(\[]|\.[A-Za-z0-9])",
        group="secret",
        min_entropy=0.85,
        # Its look-ahead runs at every separator; twenty token characters after one are rare.
        screen=r"[=:：＝][>\t \"'`\\]*[A-Za-z0-9+_\-]{20}",
    ),
)
"""Vendor tokens (`detect-secrets`' plugins and a few more), bearer tokens, credentials in
URLs, assignments to secret-named keys, random-looking assigned values, PEM private keys."""


class _Rule:
    """A compiled `SecretPattern`: its regular expressions and how to replace their matches."""

    __slots__ = ("anchored", "compiled", "hints", "marker", "min_entropy", "screen", "widen")

    def __init__(self, compiled: tuple[re.Pattern[str], ...], secret: SecretPattern) -> None:
        self.compiled = tuple((c, _secret_group(c, secret.group)) for c in compiled)
        self.marker = f"[REDACTED:{secret.name}]"
        self.hints = tuple(h.lower() for h in secret.hints if h)
        self.widen = re.compile(f"[{secret.widen}]") if secret.widen else None
        self.min_entropy = secret.min_entropy
        self.anchored = secret.anchored and bool(self.hints)
        self.screen = re.compile(secret.screen) if secret.screen else None

    def apply(self, text: str) -> str:
        """Return ``text`` with the secret part of each match replaced (``text`` if none)."""
        for compiled, group in self.compiled:
            text = self._replace(text, compiled.finditer(text), group)
        return text

    def apply_at(self, text: str, lower: str, hints: tuple[str, ...]) -> str:
        """`apply` for an anchored rule: try its regexes only where ``lower`` holds a hint."""
        for compiled, group in self.compiled:
            starts = sorted({at for hint in hints for at in _find_all(lower, hint)})
            changed = self._replace(text, _matches_from(compiled, text, starts), group)
            if changed is not text:
                text = changed
                lower = text.lower()
        return text

    def _replace(self, text: str, matches: Iterable[re.Match[str]], group: int | str | None) -> str:
        out: list[str] = []
        done = 0
        for match in matches:
            if group is None:  # a pattern with a ``keep`` group: what follows it
                start = match.end("keep") if match.start("keep") >= 0 else match.start()
                end = match.end()
            else:
                start, end = match.span(group)
            if start >= end or end <= done:
                continue
            if self.min_entropy and not _looks_random(text[start:end], self.min_entropy):
                continue
            if self.widen is not None:
                widen = self.widen.match
                while start > done and widen(text, start - 1):
                    start -= 1
                while end < len(text) and widen(text, end):
                    end += 1
            start = max(start, done)
            out.append(text[done:start])
            out.append(self.marker)
            done = end
        if not out:
            return text
        out.append(text[done:])
        return "".join(out)


def _matches_from(
    compiled: re.Pattern[str], text: str, starts: Iterable[int]
) -> Iterator[re.Match[str]]:
    """The matches `re.Pattern.finditer` finds, for a pattern that can match only at ``starts``.

    As ``finditer`` does, a start inside the last match is passed over: a match found there
    would overlap it (a value that runs on past the next secret word), and ``finditer``
    never sees it.
    """
    end = 0
    for at in starts:
        if at < end:
            continue
        match = compiled.match(text, at)
        if match is not None:
            end = match.end()
            yield match


def _find_all(text: str, piece: str) -> Iterator[int]:
    """Every index of ``piece`` in ``text``."""
    at = text.find(piece)
    while at >= 0:
        yield at
        at = text.find(piece, at + 1)


def _secret_group(compiled: re.Pattern[str], group: int | str) -> int | str | None:
    """The group of ``compiled`` that is the secret (``None``: after the ``keep`` group)."""
    if "keep" in compiled.groupindex:
        return None
    if isinstance(group, str):
        return group if group in compiled.groupindex else 0
    return group if group <= compiled.groups else 0


def _looks_random(value: str, minimum: float) -> bool:
    """Whether ``value`` mixes character classes and its normalized entropy is ``minimum``+."""
    classes = (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
    )
    if classes < 2:
        return False
    n = len(value)
    bits = -sum(k / n * math.log2(k / n) for k in Counter(value).values())
    return bits / math.log2(min(n, 64)) >= minimum


def redact(text: str, secrets: Iterable[SecretPattern] = DEFAULT_SECRETS) -> str:
    """Return ``text`` with the secret part of every match of ``secrets`` redacted.

    ``text`` itself comes back when nothing matched. Results are cached per pattern set
    (`CACHE_CHARS`).

    Raises:
        ConfigurationError: a pattern names a `detect-secrets` plugin that is not installed.
    """
    if not text:
        return text
    gates = _gated(secrets if isinstance(secrets, tuple) else tuple(secrets))
    key = (gates, text)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
    if found is not None:
        return found or text  # `_UNCHANGED`: nothing matched
    clean = _redact(text, gates)
    _remember(key, clean)
    return clean


def _redact(text: str, gates: _Gates) -> str:
    """`redact` without the cache: the rules that may match ``text``, in order."""
    lower = text.lower()
    live = gates.live(text, lower, 0)
    rules = gates.rules
    at = 0
    while at < len(live):
        index, hints = live[at]
        at += 1
        rule = rules[index]
        if rule.screen is not None:
            changed = _on_lines(text, rule, _screened(text, rule.screen))
        elif not hints:
            changed = rule.apply(text)
        elif len(lower) != len(text):  # a character whose lower case is longer: line by line
            changed = _by_lines(text, rule, hints)
        elif rule.anchored:
            changed = rule.apply_at(text, lower, hints)
        else:
            changed = _on_hinted_lines(text, lower, rule, hints)
        if changed is not text:
            # The markers and what was cut change what the later rules may find.
            text = changed
            lower = text.lower()
            live, at = gates.live(text, lower, index + 1), 0
    return text


class _Gates:
    """A compiled pattern set with the ``str`` membership tests that rule its patterns out.

    A rule with hints may match only where the lower-cased text holds one of them (and is then
    run with those it holds); a rule whose every regular expression holds a literal piece
    (`_literals`) may match only where the text holds one of those; the others always run.
    Each distinct piece is searched once per text, whatever the number of rules naming it.
    """

    __slots__ = ("always", "insensitive", "rules", "sensitive")

    def __init__(self, rules: tuple[_Rule, ...]) -> None:
        self.rules = rules
        sensitive: dict[str, list[int]] = {}
        insensitive: dict[str, list[int]] = {}
        always: list[int] = []
        for index, rule in enumerate(rules):
            if rule.hints:
                for hint in dict.fromkeys(rule.hints):
                    insensitive.setdefault(hint, []).append(index)
                continue
            pieces = [_literals(compiled) for compiled, _ in rule.compiled]
            if not pieces or any(p is None for p in pieces):
                always.append(index)
                continue
            found = {n for p in pieces for n in p or ()}
            # A piece that holds another of the rule's pieces adds nothing to its test.
            for piece in sorted(p for p in found if not any(o != p and o in p for o in found)):
                sensitive.setdefault(piece, []).append(index)
        self.sensitive = tuple(sensitive.items())
        self.insensitive = tuple(insensitive.items())
        self.always = tuple(always)

    def live(self, text: str, lower: str, start: int) -> list[tuple[int, tuple[str, ...]]]:
        """Return, in order, the rules from ``start`` on that may match ``text``.

        Each comes with the hints ``lower`` holds (``()`` for a rule without hints).
        """
        hit: dict[int, list[str]] = {i: [] for i in self.always if i >= start}
        for piece, indices in self.sensitive:
            if piece in text:
                for i in indices:
                    if i >= start:
                        hit.setdefault(i, [])
        for hint, indices in self.insensitive:
            if hint in lower:
                for i in indices:
                    if i >= start:
                        hit.setdefault(i, []).append(hint)
        return [(i, tuple(hit[i])) for i in sorted(hit)]


def _literals(compiled: re.Pattern[str]) -> tuple[str, ...] | None:
    """Return literal pieces one of which every match of ``compiled`` holds (``None``: unknown).

    Read from the parsed expression (`re._parser`, the module `re` compiles with): a run of
    literal characters in its top-level sequence, or one piece per alternative of a branch
    there. Case-insensitive parts are not read (their literals match other cases), and
    anything unexpected gives ``None``: the rule then always runs.
    """
    if compiled.flags & re.IGNORECASE:
        return None
    try:
        parsed = _PARSER.parse(compiled.pattern, compiled.flags)
        if parsed.state.flags & re.IGNORECASE:
            return None
        return _pieces(list(parsed))
    except Exception:  # a private module's shape: never a reason to redact less
        return None


def _pieces(items: list[tuple[Any, Any]]) -> tuple[str, ...] | None:
    """`_literals` of one parsed sequence: its most selective literal requirement."""
    best: tuple[str, ...] | None = None

    def consider(found: tuple[str, ...] | None) -> None:
        nonlocal best
        if found and all(found) and (best is None or min(map(len, found)) > min(map(len, best))):
            best = found

    run: list[str] = []
    for op, av in items:
        if op is _LITERAL:
            run.append(chr(av))
            continue
        consider(("".join(run),) if run else None)
        run = []
        if op is _SUBPATTERN:
            _group, add_flags, del_flags, inner = av
            if not add_flags and not del_flags:  # a group of the sequence: matched whole
                consider(_pieces(list(inner)))
        elif op is _BRANCH:
            alternatives = [_pieces(list(a)) for a in av[1]]
            if all(alternatives):
                consider(tuple({p for a in alternatives for p in a or ()}))
    consider(("".join(run),) if run else None)
    return best


_PARSER: Any = importlib.import_module("re._parser")
_CONSTANTS: Any = importlib.import_module("re._constants")
_LITERAL: Final = _CONSTANTS.LITERAL
_SUBPATTERN: Final = _CONSTANTS.SUBPATTERN
_BRANCH: Final = _CONSTANTS.BRANCH

CACHE_CHARS = 8_000_000
"""How much text (keys and results, in characters) the cache of redacted texts holds."""
_ENTRY_CHARS: Final = 64
"""What an entry costs besides its text, counted in characters (small texts are many)."""
_UNCHANGED: Final = ""
"""The cached result of a text that nothing matched (the caller's own text is returned)."""
_CACHE: OrderedDict[tuple[_Gates, str], str] = OrderedDict()
_CACHE_LOCK = threading.Lock()  # recorders redact in worker threads too
_cached_chars = 0


def _remember(key: tuple[_Gates, str], clean: str) -> None:
    """Cache ``clean`` for ``key`` and drop the least recently used beyond `CACHE_CHARS`."""
    global _cached_chars
    text = key[1]
    value = _UNCHANGED if clean is text else clean
    size = len(text) + len(value) + _ENTRY_CHARS
    if size > CACHE_CHARS // 8:
        return  # one huge text would push out everything else
    with _CACHE_LOCK:
        if key in _CACHE:
            return
        _CACHE[key] = value
        _cached_chars += size
        while _cached_chars > CACHE_CHARS and _CACHE:
            (_, old), dropped = _CACHE.popitem(last=False)
            _cached_chars -= len(old) + len(dropped) + _ENTRY_CHARS


def clear_redaction_cache() -> None:
    """Forget every cached redaction (texts redacted before are redacted anew)."""
    global _cached_chars
    with _CACHE_LOCK:
        _CACHE.clear()
        _cached_chars = 0


def _on_hinted_lines(text: str, lower: str, rule: _Rule, hints: tuple[str, ...]) -> str:
    """Apply ``rule`` only to the lines of ``text`` where ``lower`` holds a hint.

    The hints are found with ``str.find`` (C speed over the whole text); only the lines
    around them are matched, so a long text with no secret costs one scan per hint.
    """
    spans: set[tuple[int, int]] = set()
    for hint in hints:
        at = lower.find(hint)
        while at >= 0:
            start = lower.rfind("\n", 0, at) + 1
            end = lower.find("\n", at)
            end = len(lower) if end < 0 else end + 1
            spans.add((start, end))
            at = lower.find(hint, end)
    return _on_lines(text, rule, spans)


def _screened(text: str, screen: re.Pattern[str]) -> set[tuple[int, int]]:
    """Return the lines of ``text`` (start, end after the newline) where ``screen`` matches."""
    spans: set[tuple[int, int]] = set()
    end = 0
    for match in screen.finditer(text):
        at = match.start()
        if at < end:
            continue  # on a line found already
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end + 1
        spans.add((start, end))
    return spans


def _on_lines(text: str, rule: _Rule, spans: set[tuple[int, int]]) -> str:
    """Apply ``rule`` to the lines of ``text`` at ``spans`` (``text`` itself if none changed)."""
    if not spans:
        return text
    out: list[str] = []
    done = 0
    changed = False
    for start, end in sorted(spans):
        if start < done:
            continue  # the same line, found by another hint
        line = text[start:end]
        clean = rule.apply(line)
        changed = changed or clean is not line
        out.append(text[done:start])
        out.append(clean)
        done = end
    if not changed:
        return text
    out.append(text[done:])
    return "".join(out)


def _by_lines(text: str, rule: _Rule, hints: tuple[str, ...]) -> str:
    """Apply ``rule`` to each line of ``text`` that holds a hint (case-folded line by line)."""
    lines = text.splitlines(keepends=True)
    changed = False
    for i, line in enumerate(lines):
        folded = line.lower()
        if any(h in folded for h in hints):
            clean = rule.apply(line)
            if clean is not line:
                lines[i], changed = clean, True
    return "".join(lines) if changed else text


_LAST: list[tuple[tuple[SecretPattern, ...], _Gates]] = []
"""The pattern set used last and its gates: found by identity, not by hashing every pattern."""


def _gated(secrets: tuple[SecretPattern, ...]) -> _Gates:
    """Return the gates of a pattern set (one object per set while it stays cached)."""
    last = _LAST[0] if _LAST else None
    if last is not None and last[0] is secrets:
        return last[1]
    gates = _gates(secrets)
    _LAST[:] = [(secrets, gates)]
    return gates


@functools.lru_cache(maxsize=32)
def _gates(secrets: tuple[SecretPattern, ...]) -> _Gates:
    return _Gates(_compiled(secrets))


@functools.lru_cache(maxsize=32)
def _compiled(secrets: tuple[SecretPattern, ...]) -> tuple[_Rule, ...]:
    """Compile a pattern set once (redaction runs on every message the store receives)."""
    return tuple(
        _Rule(_detector(secret) if secret.detector else (re.compile(secret.pattern),), secret)
        for secret in secrets
    )


def _detector(secret: SecretPattern) -> tuple[re.Pattern[str], ...]:
    """The regular expressions of the `detect-secrets` plugin that ``secret`` names."""
    module, _, name = secret.detector.partition(":")
    try:
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)
        denylist = tuple(plugin.denylist)
    except (ImportError, AttributeError, TypeError) as error:
        raise ConfigurationError(
            f"the secret pattern {secret.name!r} names the detect-secrets plugin "
            f"{secret.detector!r}, which this installation does not have ({error}); name one "
            "as 'module:Class' of detect_secrets.plugins, or give a pattern instead"
        ) from error
    # Recompiled ASCII-only: their \w and \b then end a token at CJK text, as they do at a space.
    return tuple(
        re.compile(p.pattern, (p.flags & ~re.UNICODE) | re.ASCII)
        if isinstance(p, re.Pattern)
        else re.compile(p, re.ASCII)
        for p in denylist
    )


def redact_message(message: Message, secrets: Sequence[SecretPattern] = DEFAULT_SECRETS) -> Message:
    """Return ``message`` with secrets redacted in its text, reasoning and tool-call arguments.

    Used by everything that writes messages to a store (`harness.sessions.SessionRecorder`);
    the same message object comes back when nothing matched, so a clean round copies nothing.
    Tool-call arguments are redacted value by value, so they stay valid JSON.
    """
    if not secrets:
        return message
    patterns = tuple(secrets)
    changes: dict[str, object] = {}
    content = message.content
    if isinstance(content, str):
        clean = redact(content, patterns)
        if clean != content:
            changes["content"] = clean
    elif content:
        parts = tuple(
            msgspec.structs.replace(p, text=redact(p.text, patterns)) if p.text else p
            for p in content
        )
        if any(a.text != b.text for a, b in zip(parts, content, strict=True)):
            changes["content"] = parts
    if message.reasoning_content:
        clean = redact(message.reasoning_content, patterns)
        if clean != message.reasoning_content:
            changes["reasoning_content"] = clean
    if message.tool_calls:
        calls = tuple(
            msgspec.structs.replace(c, arguments=_redact_arguments(c.arguments, patterns))
            for c in message.tool_calls
        )
        if any(a.arguments != b.arguments for a, b in zip(calls, message.tool_calls, strict=True)):
            changes["tool_calls"] = calls
    return message.replace(**changes) if changes else message


_PROBE: Final = "Zq7xK2pL9wE4"
"""A password-like value: a tool-call argument is redacted whole when its key would redact this."""


def _redact_arguments(arguments: str, secrets: tuple[SecretPattern, ...]) -> str:
    if redact(arguments, secrets) == arguments:
        return arguments
    try:
        decoded = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return redact(arguments, secrets)

    def keyed(key: str, value: object) -> object:
        if isinstance(value, str) and value:  # {"password": "..."}: all of it, by its key
            probe = f"{key}={_PROBE}"
            named = redact(probe, secrets)
            if named != probe and named.startswith(f"{key}=") and _PROBE not in named:
                return named[len(key) + 1 :]
        return walk(value)

    def walk(value: object) -> object:
        if isinstance(value, str):
            return redact(value, secrets)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, dict):
            return {k: keyed(k, v) if isinstance(k, str) else walk(v) for k, v in value.items()}
        return value

    return msgspec.json.encode(walk(decoded)).decode()
