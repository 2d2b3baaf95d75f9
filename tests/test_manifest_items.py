"""`ManifestItems`: a tuple-like sequence whose chunks consecutive manifests share."""

from __future__ import annotations

import pickle
from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.manifest import (
    CHUNK,
    ContextManifest,
    ItemsDraft,
    ManifestItem,
    ManifestItems,
    dec_hook,
    enc_hook,
)


def _item(n: int) -> ManifestItem:
    return ManifestItem(kind="message", source_id=f"history/m{n}", tokens=n, role="user")


ITEMS = tuple(_item(n) for n in range(3 * CHUNK + 17))


def _manifest(items: tuple[ManifestItem, ...] | ManifestItems) -> ContextManifest:
    return ContextManifest(
        call_id="c1",
        purpose="agent",
        model="m",
        estimated_input_tokens=sum(i.tokens for i in items),
        input_limit=1_000_000,
        counting_method="approximate:o200k",
        exact=False,
        items=items,  # type: ignore[arg-type]  # a tuple is wrapped, as a user may pass one
    )


@pytest.mark.parametrize("length", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, len(ITEMS)])
def test_reads_like_the_tuple_it_was_made_from(length: int) -> None:
    flat = ITEMS[:length]
    items = ManifestItems(flat)
    assert isinstance(items, Sequence) and len(items) == length and bool(items) == bool(flat)
    assert tuple(items) == flat and list(reversed(items)) == list(reversed(flat))
    assert [items[i] for i in range(-length, length)] == [flat[i] for i in range(-length, length)]
    for bad in (length, -length - 1):
        with pytest.raises(IndexError):
            items[bad]
    with pytest.raises(TypeError):
        items["0"]  # type: ignore[call-overload]
    if len(flat) > 1:
        assert items[True] == flat[True] and items[False] == flat[0]
    for cut in (slice(0, length // 2), slice(3, None), slice(None, None, 3), slice(None, None, -1)):
        assert items[cut] == flat[cut] and isinstance(items[cut], ManifestItems)
    assert items == flat and items == ManifestItems(flat) and hash(items) == hash(flat)
    extra = (_item(-1),)
    assert items != (*flat, *extra) and items != list(flat)
    assert items + extra == (*flat, *extra)  # `+` is what is tested
    assert extra + items == (*extra, *flat)
    if flat:
        assert flat[-1] in items and items.index(flat[-1]) == length - 1
    assert pickle.loads(pickle.dumps(items)) == items


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, len(ITEMS)),
    st.one_of(st.none(), st.integers(-len(ITEMS) - 5, len(ITEMS) + 5)),
    st.one_of(st.none(), st.integers(-len(ITEMS) - 5, len(ITEMS) + 5)),
)
def test_every_span_is_the_tuples_and_indexes_like_one(
    length: int, start: int | None, stop: int | None
) -> None:
    flat = ITEMS[:length]
    span = ManifestItems(flat)[start:stop]
    assert isinstance(span, ManifestItems) and span == flat[start:stop]
    assert len(span) == len(flat[start:stop])
    assert [span[i] for i in range(len(span))] == list(flat[start:stop])  # chunks well cut
    assert span[1:] == flat[start:stop][1:] and span[:-1] == flat[start:stop][:-1]


def test_a_span_from_a_chunks_start_shares_the_full_chunks() -> None:
    items = ManifestItems(ITEMS)
    tail = items[CHUNK:]
    assert tail == ITEMS[CHUNK:] and tail._chunks[0] is items._chunks[1]
    assert items[CHUNK + 3 :] == ITEMS[CHUNK + 3 :] and items[5:9] == ITEMS[5:9]


OPS = st.lists(
    st.tuples(st.sampled_from(["cut", "extend", "build", "update"]), st.integers(0, 3 * CHUNK)),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_a_draft_always_hands_out_what_a_list_would(ops: list[tuple[str, int]]) -> None:
    """Cutting, extending and building in any order (or all three in one `update`): the
    same items as a plain list."""
    draft, made = ItemsDraft(), 0
    kept: list[ManifestItem] = []
    last: ManifestItems | None = None
    for op, n in ops:
        if op == "cut":
            n = min(n, len(kept))
            draft.cut(n)
            del kept[n:]
        elif op == "extend":
            new = [_item(made + k) for k in range(n % (CHUNK + 9))]
            made += len(new)
            draft.extend(new)
            kept.extend(new)
        else:
            tail = tuple(_item(-k - 1) for k in range(n % 5))
            if op == "update":  # keep a part, add a few: a round's manifest
                keep = len(kept) - n % 7 if n % 7 <= len(kept) else len(kept)
                new = [_item(made + k) for k in range(n % 3 if n % 4 else n % (CHUNK + 3))]
                made += len(new)
                del kept[keep:]
                kept.extend(new)
                items = draft.update(keep, new, tail)
            else:
                items = draft.items(tail)
            assert len(draft) == len(kept)
            assert items == tuple(kept) + tail and len(items) == len(kept) + len(tail)
            assert [items[i] for i in range(len(items))] == kept + list(tail)
            if last is not None:  # agrees with a brute-force count of the shared prefix
                brute = next(
                    (i for i, (a, b) in enumerate(zip(last, items, strict=False)) if a != b),
                    min(len(last), len(items)),
                )
                assert last.shared_with(items) == brute == items.shared_with(last)
            last = items


ROUNDS = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 4), st.sampled_from([0, 0, 1, 3])),
    min_size=40,
    max_size=160,
)


@settings(max_examples=60, deadline=None)
@given(ROUNDS)
def test_a_session_of_rounds_gets_the_items_a_list_would(
    rounds: list[tuple[int, int, int]],
) -> None:
    """Round after round: a message or two rewritten at the end, a few new, the tail items
    (blocks, tools) or none; the history crosses chunk edges in every way."""
    draft, kept, made = ItemsDraft(), list[ManifestItem](), 0
    for back, added, tails in rounds:
        keep = max(0, len(kept) - back)
        new = [_item(made + k) for k in range(added)]
        made += added
        tail = tuple(_item(-k - 1) for k in range(tails))
        del kept[keep:]
        kept.extend(new)
        assert draft.update(keep, new, tail) == (*kept, *tail)


@pytest.mark.parametrize("tail", [(), (_item(-1),)])
def test_an_update_that_fills_the_open_chunk_exactly_goes_on(
    tail: tuple[ManifestItem, ...],
) -> None:
    draft = ItemsDraft(ITEMS[: CHUNK - 2])
    assert draft.update(CHUNK - 2, ITEMS[CHUNK - 2 : CHUNK], tail) == ITEMS[:CHUNK] + tail
    assert draft.update(CHUNK, ITEMS[CHUNK : CHUNK + 1], tail) == ITEMS[: CHUNK + 1] + tail
    assert draft.update(CHUNK - 1, [], tail) == ITEMS[: CHUNK - 1] + tail


def test_a_cut_past_the_end_is_refused() -> None:
    draft = ItemsDraft(ITEMS[:5])
    with pytest.raises(ValueError, match="cannot cut 5 items to 6"):
        draft.cut(6)


def test_consecutive_manifests_share_their_full_chunks() -> None:
    """What makes a round cost its new items: the earlier chunks are the very same objects."""
    draft = ItemsDraft(ITEMS[: 2 * CHUNK + 3])
    before = draft.items((_item(-1),))
    draft.extend(ITEMS[2 * CHUNK + 3 :])
    after = draft.items((_item(-1),))
    assert after._chunks[0] is before._chunks[0] and after._chunks[1] is before._chunks[1]
    draft.cut(CHUNK + 5)  # a message rewritten in the second chunk: only the first stays
    rewritten = draft.items()
    assert rewritten._chunks[0] is before._chunks[0]
    assert rewritten == ITEMS[: CHUNK + 5]
    assert before.shared_with(rewritten) == CHUNK + 5


def test_a_draft_started_from_items_continues_them() -> None:
    for length in (0, CHUNK, CHUNK + 7):
        draft = ItemsDraft(ManifestItems(ITEMS[:length]))
        draft.extend(ITEMS[length : length + 70])
        assert draft.items() == ITEMS[: length + 70]


def test_a_manifest_round_trips_through_json_as_a_plain_array() -> None:
    manifest = _manifest(ITEMS)
    assert isinstance(manifest.items, ManifestItems)  # the tuple given was wrapped
    data = manifest.to_json()
    assert msgspec.json.decode(data)["items"][CHUNK]["source_id"] == ITEMS[CHUNK].source_id
    assert ContextManifest.from_json(data) == manifest
    assert manifest.to_dict()["items"] == [msgspec.to_builtins(i) for i in ITEMS]
    # The hooks serve any msgspec codec that holds manifests (events, a user's own log).
    packed = msgspec.msgpack.encode([manifest], enc_hook=enc_hook)
    back = msgspec.msgpack.decode(packed, type=list[ContextManifest], dec_hook=dec_hook)
    assert back == [manifest] and isinstance(back[0].items, ManifestItems)


def test_without_the_hook_encoding_fails_loudly_instead_of_dropping_items() -> None:
    with pytest.raises(TypeError, match="ManifestItems"):
        msgspec.json.encode(_manifest(ITEMS[:3]))
    with pytest.raises(NotImplementedError, match="cannot encode objects of type set"):
        enc_hook({1})


class _KeptManifest(msgspec.Struct):
    """What an app may keep in `AgentState.extensions`: the last manifest it saw."""

    last: ContextManifest


def test_a_manifest_kept_in_state_extensions_round_trips_through_the_store_codec() -> None:
    from harness.sessions.codec import decode_extensions, encode_extensions
    from harness.state import AgentState, StateKey

    kept = StateKey("app/kept", _KeptManifest)
    manifest = _manifest(ITEMS)
    stored = msgspec.json.decode(
        msgspec.json.encode(encode_extensions({kept.name: _KeptManifest(manifest)}))
    )
    back = AgentState(extensions=decode_extensions(stored)).get(kept)
    assert isinstance(back, _KeptManifest) and back.last == manifest
    assert isinstance(back.last.items, ManifestItems)
