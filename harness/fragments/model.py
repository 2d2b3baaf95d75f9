"""Context fragments as values: what a fragment is, what changes one, where a set lives.

`Fragment` (one version of one fragment), `FragmentChange` (one write), `FragmentScope`
(a session's set, or an agent's project set), `FragmentPolicy` (the hygiene of writes),
and a history message read as a fragment (`from_message`, `overlaid`). The session stores
keep these values and import only this module; the editing service that reads and writes
them through a store is `harness.fragments.editing`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, Literal, get_args

import msgspec

from harness.errors import ConfigurationError, InvalidInputError
from harness.markers import ORIGIN_ID
from harness.messages import Message
from harness.sessions.redaction import DEFAULT_SECRETS, SecretPattern, redact

if TYPE_CHECKING:
    from harness.state import SessionKey

FragmentKind = Literal["system", "user", "assistant", "tool", "file"]


Scope = Literal["session", "project"]


KINDS: Final = frozenset(get_args(FragmentKind))


DEFAULT_PROJECT: Final = "default"
"""The project name of project-scope fragments when none is given."""


TITLE_CHARS: Final = 60
"""A history fragment's title is its first line, cut to this many characters."""


class Fragment(msgspec.Struct, frozen=True, kw_only=True):
    """One version of one fragment (frozen; every change is a new version)."""

    id: str
    """The fragment id; for a history fragment, the message id it stands for."""
    kind: FragmentKind
    """``system``, ``user``, ``assistant``, ``tool`` or ``file``."""
    title: str = ""
    """A short title for listings."""
    content: str = ""
    """The text the model is given (a history fragment's current text)."""
    tags: tuple[str, ...] = ()
    """Free labels to search and filter by."""
    created_at: float = 0.0
    """Unix time it was added (0 for a history message never changed)."""
    updated_at: float = 0.0
    """Unix time of this version."""
    version: int = 1
    """This version's number; 0 is a history message as it was recorded."""
    disabled: bool = False
    """Left out of the request, but kept (enable brings it back)."""
    removed: bool = False
    """Deleted: gone from the request and from listings (its versions stay)."""
    order: float = 0.0
    """Position among the added fragments of its scope (lower first)."""
    scope: Scope = "session"
    """``session`` or ``project``."""
    message: bool = False
    """A history fragment: ``id`` is a message id and the content overlays the message."""
    edited: bool = False
    """The developer changed the content (for a history fragment: it replaces the message's
    text; for a built-in: it is no longer the shipped text, and no upgrade overwrites it)."""
    builtin: int = 0
    """For a built-in System fragment (`Builtin`): the revision of the shipped text it was
    seeded from; 0 for any other fragment."""
    part: str = ""
    """For a built-in that governs a System part another layer adds (``mode/plan``): that
    part's name; the fragment then applies only while the part is there."""

    def replace(self, **changes: object) -> Fragment:
        """Return a copy with ``changes`` applied."""
        return msgspec.structs.replace(self, **changes)

    @property
    def label(self) -> str:
        """The id and version as manifests and transforms show them: ``fragment:<id>@<v>``."""
        return f"fragment:{self.id}@{self.version}"


class FragmentChange(msgspec.Struct, frozen=True, kw_only=True):
    """One write: the fragment's new version, the operation and the version it replaces."""

    fragment: Fragment
    op: str
    """``add``, ``edit``, ``remove``, ``disable``, ``enable``, ``move``, ``revert``, or ``seed``
    (a built-in written or upgraded by `seed_builtins`)."""
    old_version: int


class FragmentScope(msgspec.Struct, frozen=True):
    """Which fragment set: a user's session, or an agent's project (no user)."""

    user_id: str
    agent_id: str
    scope: Scope
    name: str
    """The session id, or the project name."""

    @classmethod
    def of_session(cls, key: SessionKey) -> FragmentScope:
        """Return the scope of the fragments of ``key``'s session."""
        return cls(key.user_id, key.agent_id, "session", key.session_id)

    @classmethod
    def of_project(cls, agent_id: str, project: str = DEFAULT_PROJECT) -> FragmentScope:
        """Return the scope of an agent's project fragments (shared by every user)."""
        return cls("", agent_id, "project", project)


FragmentList = list[Fragment]
"""A list of fragments (the name keeps `Fragments.list` from shadowing ``list``)."""


# ---------------------------------------------------------------- hygiene
class FragmentPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The hygiene rules of fragment writes."""

    max_chars: int = 100_000
    """The largest content (and title) a fragment may have, in characters."""
    secrets: tuple[SecretPattern, ...] = DEFAULT_SECRETS
    """What to redact before anything is stored (``()``: nothing)."""

    def __post_init__(self) -> None:
        if self.max_chars < 1:
            raise ConfigurationError(f"max_chars must be positive, got {self.max_chars}")
        for secret in self.secrets:
            try:
                re.compile(secret.pattern)
            except re.error as error:
                raise ConfigurationError(
                    f"the secret pattern {secret.name!r} is not a valid regular expression: {error}"
                ) from error

    def clean(self, text: str, what: str = "content") -> str:
        """Return ``text`` with secrets redacted, after checking its size.

        Raises:
            InvalidInputError: ``text`` is longer than ``max_chars``.
        """
        if not isinstance(text, str):
            raise InvalidInputError(f"a fragment's {what} must be text, got {type(text).__name__}")
        if len(text) > self.max_chars:
            raise InvalidInputError(
                f"the fragment's {what} is {len(text):,} characters, over the limit of "
                f"{self.max_chars:,}; split it into smaller fragments or raise "
                "FragmentPolicy(max_chars=...)",
                chars=len(text),
                limit=self.max_chars,
            )
        return redact(text, self.secrets)


# ---------------------------------------------------------- history fragments
def ref_id(message: Message) -> str:
    """Return the fragment id of a history message: its original's id for a rewritten copy."""
    origin = message.meta(ORIGIN_ID)
    return origin if isinstance(origin, str) and origin else message.id


def from_message(message: Message) -> Fragment:
    """Return version 0 of the history fragment that ``message`` is."""
    kind: FragmentKind = message.role if message.role in KINDS else "user"
    return Fragment(
        id=ref_id(message),
        kind=kind,
        title=_title(message),
        content=message.text,
        version=0,
        message=True,
    )


def _title(message: Message) -> str:
    if message.role == "tool":
        return f"result of {message.name or message.tool_call_id or 'a tool'}"
    if message.tool_calls:
        return "calls " + ", ".join(call.name for call in message.tool_calls)
    first = message.text.strip().split("\n", 1)[0]
    return first if len(first) <= TITLE_CHARS else first[: TITLE_CHARS - 1] + "…"


def overlaid(message: Message, overlay: Fragment | None) -> Fragment:
    """Return the history fragment of ``message`` with its overlay applied (if any)."""
    base = from_message(message)
    if overlay is None:
        return base
    return overlay.replace(
        kind=base.kind,
        title=overlay.title or base.title,
        content=overlay.content if overlay.edited else base.content,
    )


SetsFound = Sequence[tuple[int, Sequence[Fragment]]]
"""Each scope's ``(version, fragments)``, read-only (`AnswersSetsAtOnce.fragment_sets_now`)."""


SetsNow = Callable[[Sequence[FragmentScope]], SetsFound | None]
"""`AnswersSetsAtOnce.fragment_sets_now` of one store (`sets_now_of`)."""
