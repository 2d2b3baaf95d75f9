"""Tools from plain functions: schemas, injected context, errors as results."""

from __future__ import annotations

import msgspec
import pytest

from harness import AgentState, ConfigurationError, Tool, ToolCall, ToolContext


def lookup(city: str, days: int = 1, *, context: ToolContext) -> str:
    """Look up the weather.

    Args:
        city: the city name, e.g. Paris.
        days: how many days
            ahead to look.
    """
    return f"{city}:{days}:{context.session_id}"


async def async_tool(items: list[int]) -> dict[str, int]:
    """Sum items."""
    return {"sum": sum(items)}


def _ctx(name: str = "t") -> ToolContext:
    return ToolContext(state=AgentState(), call=ToolCall(id="1", name=name), session_id="s1")


def test_schema_comes_from_hints_and_docstring() -> None:
    tool = Tool(lookup)
    params = tool.schema.parameters
    assert tool.schema.description == "Look up the weather."
    assert params["required"] == ["city"]
    assert params["properties"]["city"]["description"] == "the city name, e.g. Paris."
    assert params["properties"]["days"]["description"] == "how many days ahead to look."
    assert "context" not in params["properties"]


async def test_context_is_injected_and_defaults_apply() -> None:
    assert await Tool(lookup).run('{"city": "Oslo"}', _ctx()) == "Oslo:1:s1"


async def test_async_tools_and_structured_results() -> None:
    result = await Tool(async_tool).run('{"items": [1, 2, 3]}', _ctx())
    assert msgspec.json.decode(result) == {"sum": 6}


async def test_invalid_arguments_become_an_error_result() -> None:
    result = await Tool(lookup).run('{"days": "x"}', _ctx())
    assert result.startswith("Error: invalid arguments for lookup")


async def test_a_raising_tool_returns_an_error_result() -> None:
    def broken() -> str:
        """Fail."""
        raise RuntimeError("disk full")

    assert await Tool(broken).run("{}", _ctx()) == "Error: RuntimeError: disk full"


def test_bad_tool_names_are_rejected() -> None:
    with pytest.raises(ConfigurationError):
        Tool(lookup, name="has space")


def _returning(value: object) -> Tool:
    def produce() -> object:
        """Return a fixed value."""
        return value

    return Tool(produce)


async def test_a_lone_surrogate_in_a_result_is_replaced_not_a_crash() -> None:
    result = await _returning("ok \ud800 done").run("{}", _ctx())
    assert result == "ok \ufffd done"
    result.encode("utf-8")  # valid UTF-8: what is stored is what is offloaded


async def test_strings_nested_in_a_structure_are_cleaned_the_same_way() -> None:
    result = await _returning({"line": "a\udc80b"}).run("{}", _ctx())
    assert msgspec.json.decode(result) == {"line": "a\ufffdb"}


async def test_a_self_referential_result_is_an_error_result() -> None:
    loop: list[object] = []
    loop.append(loop)
    result = await _returning(loop).run("{}", _ctx())
    assert result.startswith("Error: produce returned a list that cannot be converted to text")
    assert "without cycles" in result


async def test_utf8_bytes_are_decoded_not_base64() -> None:
    assert await _returning("héllo".encode()).run("{}", _ctx()) == "héllo"
    nested = await _returning({"body": b"plain"}).run("{}", _ctx())
    assert msgspec.json.decode(nested) == {"body": "plain"}


async def test_bytes_that_are_not_text_are_an_error_result() -> None:
    result = await _returning(b"\x89PNG\r\n\x1a\n\xff").run("{}", _ctx())
    assert result.startswith("Error: produce returned 9 bytes that are not UTF-8 text")
    assert "must return text" in result


async def test_an_exception_whose_str_fails_is_still_an_error_result() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    def broken() -> str:
        """Fail oddly."""
        raise Unprintable

    assert await Tool(broken).run("{}", _ctx()) == (
        "Error: Unprintable: (the Unprintable could not be shown as text)"
    )
