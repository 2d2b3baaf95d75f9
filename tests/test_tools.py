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
