"""Built-in System parts as project fragments: working principles, environment, mode rules.

The harness ships a few System parts (`middleware.DEFAULT_BUILTINS`, built where the parts
they govern are known). `seed_builtins` writes them into a
project's fragments once; from then on each is a ``system`` fragment like any other — listed,
edited, disabled, moved, reverted through `harness.fragments.Fragments` and the CLI — and
what the developer did to it is what the model receives (`middleware.FragmentEditor` applies
them, with ``FragmentEditor(builtins=DEFAULT_BUILTINS)``).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from harness.errors import StateConflict
from harness.fragments.model import Fragment, FragmentChange, FragmentList, FragmentScope

if TYPE_CHECKING:
    from harness.sessions.store import FragmentStore, SessionKey


class Builtin(msgspec.Struct, frozen=True, kw_only=True):
    """A System part the harness ships, kept as a project ``system`` fragment.

    `seed_builtins` writes it into a project once; from then on it is a fragment like any
    other — listed, edited, disabled, reverted — and what the developer did to it is what
    the model receives. ``{date}``, ``{platform}`` and ``{cwd}`` in its content are filled
    in at request time (`render_placeholders`), so the stored text stays a template.
    """

    id: str
    """The fragment id (stable: ``builtin-<name>``)."""
    title: str
    """The title listings show."""
    content: str
    """The shipped text (a template)."""
    part: str = ""
    """The System part of another layer this fragment governs (``mode/plan``: applied only
    while that layer adds the part; disabled leaves it out, edited replaces its text);
    empty: the fragment is its own System part."""
    revision: int = 1
    """Raise it when the shipped text changes: an untouched seed is then upgraded."""


PLACEHOLDERS: Final = ("{date}", "{platform}", "{cwd}")
"""What a built-in's content may contain, filled in for each request."""


def render_placeholders(text: str, *, cwd: str, now: float | None = None) -> str:
    """Return a built-in's ``text`` with ``{date}`` (UTC), ``{platform}`` and ``{cwd}`` filled in."""
    if "{" not in text:
        return text
    day = time.strftime("%Y-%m-%d", time.gmtime(time.time() if now is None else now))
    values = (day, f"{platform.system()} {platform.release()}".strip(), cwd)
    for placeholder, value in zip(PLACEHOLDERS, values, strict=True):
        text = text.replace(placeholder, value)
    return text


def builtin_changes(
    builtins: Sequence[Builtin], stored: Sequence[Fragment]
) -> list[FragmentChange]:
    """Return the writes that bring ``stored`` (a project's fragments) up to ``builtins``.

    A missing built-in is added (after the project's other fragments); one seeded from an
    older revision is upgraded unless the developer edited its content. Nothing else is
    touched: a disabled, removed, moved or edited built-in stays as the developer left it.
    """
    by_id = {f.id: f for f in stored}
    last = max((f.order for f in stored if not f.message), default=0.0)
    now = time.time()
    changes: list[FragmentChange] = []
    for builtin in builtins:
        current = by_id.get(builtin.id)
        if current is None:
            last += 1.0
            fragment = Fragment(
                id=builtin.id,
                kind="system",
                title=builtin.title,
                content=builtin.content,
                tags=("builtin",),
                created_at=now,
                updated_at=now,
                order=last,
                scope="project",
                builtin=builtin.revision,
                part=builtin.part,
            )
            changes.append(FragmentChange(fragment=fragment, op="seed", old_version=0))
        elif 0 < current.builtin < builtin.revision and not current.edited:
            upgraded = current.replace(
                title=builtin.title,
                content=builtin.content,
                part=builtin.part,
                builtin=builtin.revision,
                version=current.version + 1,
                updated_at=now,
            )
            changes.append(
                FragmentChange(fragment=upgraded, op="seed", old_version=current.version)
            )
    return changes


async def seed_builtins(
    store: FragmentStore,
    scope: FragmentScope,
    builtins: Sequence[Builtin],
    *,
    log: SessionKey | None = None,
) -> tuple[int, FragmentList]:
    """Write ``builtins`` into a project's fragments where missing or outdated; return the set.

    Idempotent: a second call writes nothing. Two processes seeding at once do not fail —
    the one that loses re-reads what the other wrote (``seed`` events in ``log``'s session).
    """
    for _ in range(3):
        version, stored = await store.fragments(scope)
        changes = builtin_changes(builtins, stored)
        if not changes:
            return version, stored
        try:
            await store.commit_fragments(scope, expected_version=version, changes=changes, log=log)
        except StateConflict:
            continue  # someone else wrote the set meanwhile: look again
    return await store.fragments(scope)
