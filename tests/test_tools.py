"""Tools from plain functions: schemas, injected context, errors as results."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import msgspec
import pytest
from pydantic import BaseModel, Field

from harness import AgentState, ConfigurationError, ContentPart, Tool, ToolCall, ToolContext


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


async def test_content_parts_are_kept_as_parts_and_run_gives_their_text() -> None:
    image = ContentPart(type="image_url", data={"image_url": {"url": "data:image/png;base64,AA=="}})
    parts = [ContentPart(type="text", text="shot \ud800"), image]
    tool = _returning(parts)
    assert await tool.run_content("{}", _ctx()) == (
        ContentPart(type="text", text="shot \ufffd"),
        image,
    )
    assert await _returning(image).run_content("{}", _ctx()) == (image,)
    assert await tool.run("{}", _ctx()) == "shot \ufffd\n[a image_url part, not shown as text]"
    bad = await _returning([ContentPart(type="")]).run_content("{}", _ctx())
    assert isinstance(bad, str) and bad.startswith("Error: produce returned content parts")


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


# ------------------------------------------------------------ docstring styles
def sphinx_style(city: str, days: int = 1) -> str:
    """Look up the weather
    for a city.

    :param city: the city name,
        e.g. Paris.
    :param int days: how many days ahead.
    :returns: the forecast.
    """
    return city


def numpy_style(city: str, days: int = 1) -> str:
    """Look up the weather.

    Parameters
    ----------
    city : str
        the city name,
        e.g. Paris.
    days : int, optional
        how many days ahead.

    Returns
    -------
    str
        the forecast.
    """
    return city


@pytest.mark.parametrize("fn", [sphinx_style, numpy_style, lookup])
def test_google_sphinx_and_numpy_docstrings_describe_the_parameters(fn: object) -> None:
    tool = Tool(fn)  # type: ignore[arg-type]
    properties = tool.schema.parameters["properties"]
    assert tool.schema.description.startswith("Look up the weather")
    assert properties["city"]["description"] == "the city name, e.g. Paris."
    assert properties["days"]["description"].startswith("how many days")


def test_a_wrapped_summary_line_is_one_sentence() -> None:
    assert Tool(sphinx_style).schema.description == "Look up the weather for a city."


# ------------------------------------------------------------ structured arguments
class Address(BaseModel):
    """Where to deliver."""

    street: str
    zip_code: str = Field(pattern=r"^\d{5}$", description="five digits")


class Order(BaseModel):
    """One order."""

    item: str
    quantity: int = Field(gt=0)
    address: Address


async def place_order(order: Order, note: Order | None = None) -> str:
    """Place an order.

    Args:
        order: the order to place.
        note: a second order, if any.
    """
    assert isinstance(order, Order) and isinstance(order.address, Address)
    return f"{order.quantity}x{order.item} to {order.address.zip_code}; second={note is not None}"


GOOD = {"item": "tea", "quantity": 2, "address": {"street": "Main St 1", "zip_code": "12345"}}


def test_a_pydantic_argument_has_the_models_own_schema() -> None:
    parameters = Tool(place_order).schema.parameters
    order = parameters["properties"]["order"]
    assert order["description"] == "the order to place."
    assert order["properties"]["quantity"]["exclusiveMinimum"] == 0
    assert order["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert parameters["$defs"]["Address"]["properties"]["zip_code"]["pattern"] == r"^\d{5}$"
    assert parameters["required"] == ["order"]
    assert {"type": "null"} in parameters["properties"]["note"]["anyOf"]


async def test_pydantic_arguments_arrive_as_model_instances() -> None:
    result = await Tool(place_order).run(msgspec.json.encode({"order": GOOD}).decode(), _ctx())
    assert result == "2xtea to 12345; second=False"
    both = msgspec.json.encode({"order": GOOD, "note": GOOD}).decode()
    assert (await Tool(place_order).run(both, _ctx())).endswith("second=True")


async def test_a_pydantic_validation_failure_is_an_error_naming_each_field() -> None:
    bad = {"item": "tea", "quantity": 0, "address": {"street": "x", "zip_code": "12"}}
    result = await Tool(place_order).run(msgspec.json.encode({"order": bad}).decode(), _ctx())
    assert result.startswith("Error: invalid arguments for place_order: ")
    assert "`order.quantity`: Input should be greater than 0" in result
    assert "`order.address.zip_code`: String should match pattern" in result
    assert result.endswith("Call it again with arguments matching its schema.")


class Point(msgspec.Struct):
    """A point."""

    x: int
    y: int


@dataclasses.dataclass
class Box:
    """A box."""

    width: float
    label: str = "box"


def measure(corner: Point, box: Box) -> str:
    """Measure a box at a corner."""
    assert isinstance(corner, Point) and isinstance(box, Box)
    return f"{corner.x},{corner.y}:{box.width}:{box.label}"


async def test_msgspec_structs_and_dataclasses_arrive_as_instances() -> None:
    tool = Tool(measure)
    assert set(tool.schema.parameters["$defs"]) == {"Point", "Box"}
    args = '{"corner": {"x": 1, "y": 2}, "box": {"width": 1.5}}'
    assert await tool.run(args, _ctx()) == "1,2:1.5:box"
    bad = await tool.run('{"corner": {"x": "one", "y": 2}, "box": {"width": 1}}', _ctx())
    assert bad.startswith("Error: invalid arguments for measure: Expected `int`")


def test_tools_never_import_pydantic_themselves() -> None:
    code = (
        "import sys\n"
        "from harness.tools import Tool\n"
        "def f(a: int, b: dict[str, int]) -> str:\n"
        "    '''Do.\n\n    Args:\n        a: a number.\n    '''\n"
        "    return ''\n"
        "Tool(f)\n"
        "print('pydantic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_a_subclass_overriding_run_is_run_by_its_override() -> None:
    # Before content parts, `Tool.run` was the override point; the loop's content-part
    # path must still reach such a tool's own `run`.
    from harness.tools import run_tool

    class Canned(Tool):
        async def run(self, arguments: str, context: ToolContext) -> str:
            return "canned answer"

    async def fallback() -> str:
        return "the function's answer"

    tool = Canned(fallback, name="canned")
    assert await run_tool(tool, "{}", _ctx("canned")) == "canned answer"
    plain = Tool(fallback, name="plain")
    assert await run_tool(plain, "{}", _ctx("plain")) == "the function's answer"
