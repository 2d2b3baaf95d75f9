"""What the model received in one round, read back from the session store.

`build_view` turns a session's ``context_build`` manifest (`ManifestEvent`: each item's kind,
placement, source and tokens, the transforms) into a `ContextView`, with the text the store
keeps behind the items: the messages behind ``history/<id>`` (rewritten copies included; a copy
made for one request only is shown with its original's text) and the fragments behind
``fragment:<id>@<v>`` blocks. The manifest carries no prompt text, so System parts, tool
schemas and blocks from sources have an id and a size but no text. ``harness context show``
(`harness.cli.context`) prints the view; `harness.cli.context_page` draws it.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec

from harness.cli._format import flat
from harness.cli.sessions import CommandError, all_events
from harness.errors import HarnessError
from harness.fragments.model import DEFAULT_PROJECT, FragmentScope
from harness.manifest import ContextManifest, Transform
from harness.messages import Message
from harness.sessions.manifest_log import resolve
from harness.sessions.store import (
    FragmentStore,
    ManifestEvent,
    SessionKey,
    SessionStore,
    UsageEvent,
)

PREVIEW_CHARS: Final = 200
"""How much of an item's text the view keeps (one line)."""
EDITED_COPY: Final = re.compile(r"(?P<id>[^~]+)~fragment(?P<version>\d+)")
"""The id of a history message sent with a fragment edit (`middleware.fragment_editor`)."""
MIN_PREFIX: Final = 4
"""The shortest call-id prefix ``--call`` accepts."""


class ViewItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of the request as the view shows it."""

    index: int
    """1-based position in the request's render order."""
    kind: str
    """``system``, ``message``, ``tool_schema`` or ``block`` (as in the manifest)."""
    placement: str
    """``system``, ``history``, ``tools``, ``TASK_STATE``, ``RUNTIME_STATE``, ``HARNESS_CONTEXT``."""
    source_id: str
    """Where it came from (``history/<message id>``, ``tool/<name>``, ``fragment:<id>@<v>`` …)."""
    tokens: int
    """Its estimated tokens, as the manifest recorded them."""
    share: float
    """``tokens`` as a share of the input budget (0–1)."""
    role: str | None = None
    """For messages: the role."""
    revision: str | None = None
    """A block's revision label, when it has one."""
    preview: str = ""
    """The start of the item's text, on one line; empty when the store keeps no text for it."""
    note: str = ""
    """Where the text came from when it is not the item's own (``text of the original <id>``,
    ``edited: fragment:<id>@<v>``)."""


class ContextView(msgspec.Struct, frozen=True, kw_only=True):
    """One round's request: its manifest, read together with the session's messages."""

    key: SessionKey
    """Whose session."""
    manifest: ContextManifest
    """The round's manifest as recorded."""
    position: int
    """Which call of the session this is (1-based, in log order)."""
    calls: int
    """How many calls the session has recorded."""
    budget: int
    """The denominator of the shares: the input limit (the item total when it is unknown)."""
    items: tuple[ViewItem, ...]
    """What the request was built from, in render order."""
    omissions: tuple[Transform, ...]
    """The transforms that left something out (their kind says so: ``Transform.omitted``)."""
    transforms: tuple[Transform, ...]
    """The other transforms: what preparation changed."""

    @property
    def used(self) -> int:
        """The tokens of every item together."""
        return sum(item.tokens for item in self.items)


async def build_view(
    store: SessionStore, key: SessionKey, call: str | None, *, project: str = DEFAULT_PROJECT
) -> ContextView:
    """Return the view of ``call`` (an id or a unique prefix; ``None``: the latest call).

    ``project`` names the project whose fragments' text the view looks up.

    Raises:
        CommandError: the session has no manifests, or none (or several) match ``call``.
    """
    import middleware.stack  # noqa: F401  (declares the stack's transform kinds: what omits)

    manifests = resolve(
        e.event
        for e in await all_events(store, key, ("manifest", "usage"), 0, None)
        if isinstance(e.event, ManifestEvent | UsageEvent)
    )
    if not manifests:
        raise CommandError(
            f"session {key.session_id!r} has recorded no model request yet; run the agent on "
            "it first"
        )
    position = _pick(manifests, call, key)
    manifest = manifests[position]
    texts = await _texts(store, key, manifest, project)
    budget = manifest.input_limit if manifest.input_limit > 0 else 0
    budget = budget or max(1, sum(i.tokens for i in manifest.items))
    items = tuple(
        ViewItem(
            index=n,
            kind=item.kind,
            placement=item.placement or item.kind,
            source_id=item.source_id,
            tokens=item.tokens,
            share=item.tokens / budget,
            role=item.role,
            revision=item.revision,
            preview=texts.get(item.source_id, ("", ""))[0],
            note=texts.get(item.source_id, ("", ""))[1],
        )
        for n, item in enumerate(manifest.items, 1)
    )
    return ContextView(
        key=key,
        manifest=manifest,
        position=position + 1,
        calls=len(manifests),
        budget=budget,
        items=items,
        omissions=tuple(t for t in manifest.transforms if t.omitted),
        transforms=tuple(t for t in manifest.transforms if not t.omitted),
    )


def _pick(manifests: list[ContextManifest], call: str | None, key: SessionKey) -> int:
    if call is None:
        return len(manifests) - 1
    exact = [n for n, m in enumerate(manifests) if m.call_id == call]
    if exact:
        return exact[-1]
    found = [n for n, m in enumerate(manifests) if m.call_id.startswith(call)]
    ids = sorted({manifests[n].call_id for n in found})
    if len(call) >= MIN_PREFIX and len(ids) == 1:
        return found[-1]
    hint = "(`harness manifests show --session ID` lists the calls)"
    if len(ids) > 1:
        raise CommandError(
            f"--call {call!r} matches {len(ids)} calls of session {key.session_id!r}: "
            f"{', '.join(ids[:5])}; give more of the id",
            status=2,
        )
    raise CommandError(f"session {key.session_id!r} has no call {call!r} {hint}")


async def _texts(
    store: SessionStore, key: SessionKey, manifest: ContextManifest, project: str
) -> dict[str, tuple[str, str]]:
    """Return ``source_id → (preview, note)`` for the items whose text the store keeps."""
    found: dict[str, tuple[str, str]] = {}
    wanted = {
        item.source_id.removeprefix("history/")
        for item in manifest.items
        if item.source_id.startswith("history/")
    }
    # A copy made for one request (an edited fragment, a call list cut short) is not logged;
    # its original is, under the id before the "~".
    wanted |= {i.split("~", 1)[0] for i in wanted}
    messages = await store.messages(key, sorted(wanted)) if wanted else {}
    for item in manifest.items:
        if not item.source_id.startswith("history/"):
            continue
        mid = item.source_id.removeprefix("history/")
        message, note = messages.get(mid), ""
        edit = EDITED_COPY.fullmatch(mid)
        if message is None and edit is not None and isinstance(store, FragmentStore):
            label = f"fragment:{edit['id']}@{edit['version']}"
            text = await _fragment_text(store, key, label, project, title=False)
            if text is not None:
                found[item.source_id] = (flat(text, PREVIEW_CHARS), f"edited: {label}")
                continue
        if message is None and (original := messages.get(mid.split("~", 1)[0])) is not None:
            message, note = original, f"text of the original {original.id}"
        if message is not None:
            found[item.source_id] = (_preview(message), note)
    for item in manifest.items:
        label = item.source_id.removeprefix("system/")  # a pinned fragment is a System part
        if label.startswith("fragment:") and isinstance(store, FragmentStore):
            system = item.source_id != label
            text = await _fragment_text(store, key, label, project, title=not system)
            if text is not None:
                found[item.source_id] = (flat(text, PREVIEW_CHARS), "")
    return found


def _preview(message: Message) -> str:
    calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
    text = message.text + (f" → {calls}" if calls else "")
    return flat(text, PREVIEW_CHARS)


async def _fragment_text(
    store: FragmentStore, key: SessionKey, label: str, project: str, *, title: bool = True
) -> str | None:
    """Return the text of ``fragment:<id>@<version>`` from the session's or project's set.

    A reference block carries the fragment's title before its content (``title``); a System
    part or an edited message carries the content alone.
    """
    fid, _, version = label.removeprefix("fragment:").rpartition("@")
    scopes = (FragmentScope.of_session(key), FragmentScope.of_project(key.agent_id, project))
    for scope in scopes:
        try:
            versions = await store.fragment_versions(scope, fid)
        except HarnessError:
            continue
        for fragment in versions:
            if str(fragment.version) == version:
                head = f"{fragment.title}: " if title and fragment.title else ""
                return head + fragment.content
    return None
