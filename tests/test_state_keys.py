"""`StateKey`: typed structured state in `AgentState.extensions`, and its stored names."""

from __future__ import annotations

import msgspec
import pytest

from harness.errors import InvalidInputError
from harness.sessions.codec import decode_extensions, encode_extensions, same_stored
from harness.state import AgentState, StateKey


class Counter(msgspec.Struct, frozen=True, kw_only=True):
    """A value an owner keeps in the state."""

    count: int = 0
    seen: tuple[str, ...] = ()


COUNTER = StateKey("tests/counter", Counter, former=("tests.counter",))


def _stored(state: AgentState) -> AgentState:
    """``state`` as it comes back from the store: its extensions as builtins."""
    plain = msgspec.json.decode(msgspec.json.encode(encode_extensions(state.extensions)))
    return AgentState(extensions=decode_extensions(plain))


def test_a_value_comes_back_from_the_store_as_the_keys_type() -> None:
    state = AgentState()
    assert state.get(COUNTER) is None
    state.set(COUNTER, Counter(count=2, seen=("a", "b")))
    back = _stored(state)
    raw = back.extensions[COUNTER.name]
    assert raw == {"count": 2, "seen": ["a", "b"]}
    value = back.get(COUNTER)
    assert value == Counter(count=2, seen=("a", "b"))
    assert back.get(COUNTER) is value  # typed once, then kept
    assert same_stored(value, raw) and not same_stored(Counter(count=3), raw)


def test_a_value_stored_under_a_former_name_is_read_and_moved_on_write() -> None:
    state = AgentState(extensions={"tests.counter": {"count": 5}})
    assert state.get(COUNTER) == Counter(count=5)
    assert set(state.extensions) == {"tests.counter"}  # reading renames nothing
    version = state.version
    state.set(COUNTER, Counter(count=6))
    assert state.extensions == {"tests/counter": Counter(count=6)}
    assert state.version == version + 1


def test_a_builtin_key_reads_its_value_unchanged() -> None:
    status = StateKey("tests/status", str)
    state = AgentState(extensions={"tests/status": "green"})
    assert state.get(status) == "green"


def test_a_stored_value_of_another_shape_is_refused_with_its_key() -> None:
    state = AgentState(extensions={"tests/counter": {"count": "many"}})
    with pytest.raises(InvalidInputError, match=r"tests/counter.*Counter"):
        state.get(COUNTER)
