"""Tools: plain Python functions, sync or async, with a JSON schema from their signature.

The schema comes from the type hints (through msgspec) and the parameter descriptions from
a Google-style docstring's ``Args:`` section. A parameter annotated `ToolContext` is filled
in by the agent and hidden from the model. A tool that raises does not end the agent loop:
the model receives an error result and can react.

What a tool returns becomes text inside the same error handling, so a value that cannot be
converted is an error result too, never a crash of the loop:

- ``str`` is kept, with lone surrogates cleaned (`harness.messages.clean_text`);
- ``None`` is the empty text;
- ``bytes`` (also as values nested in a structure) are decoded as UTF-8; bytes that are not
  UTF-8 give an error result asking the tool to return text (base64 it or describe it
  itself), never silently base64 JSON;
- anything else is encoded as JSON (unknown objects through ``str``, every string cleaned
  like a ``str`` result); a value JSON cannot hold (a self-referential list, a number out
  of range …) gives an error result.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import anyio.to_thread
import msgspec

from harness.errors import ConfigurationError
from harness.messages import ToolCall, ToolSchema, clean_text

if TYPE_CHECKING:
    from harness.request import RunScope
    from harness.state import AgentState
    from harness.workspace import Workspace


class ToolContext(msgspec.Struct, kw_only=True):
    """What a tool may use besides its arguments (never shown to the model)."""

    state: AgentState
    """The session's agent state (todos and other structured state live here)."""
    call: ToolCall
    """The call being executed."""
    workspace: Workspace | None = None
    """The agent's workspace, when it has one."""
    run: RunScope | None = None
    """The current agent call's scratch space."""
    user_id: str = ""
    """The end user's id (for access checks)."""
    session_id: str = ""
    """The session id."""


class Tool:
    """A callable the model may invoke by name.

    Args:
        fn: the function (sync or async).
        name: the tool name (default: the function's name).
        description: the description (default: the docstring's summary paragraph).
    """

    def __init__(
        self, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> None:
        if not callable(fn):
            raise ConfigurationError(f"a tool must be a function, got {fn!r}")
        self.fn = fn
        self.name = name or fn.__name__
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ConfigurationError(
                f"tool name {self.name!r} must be 1–64 letters, digits, '_' or '-' (provider rule)"
            )
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.description = description if description is not None else summary
        self._context_param: str | None = None
        self._args_type = self._build_args_type(arg_docs)
        self.schema = ToolSchema(
            name=self.name, description=self.description, parameters=_json_schema(self._args_type)
        )
        self._is_async = inspect.iscoroutinefunction(fn)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def _build_args_type(self, arg_docs: dict[str, str]) -> type[msgspec.Struct]:
        try:
            hints = get_type_hints(self.fn, include_extras=True)
        except Exception as exc:  # a NameError in an annotation is a configuration error
            raise ConfigurationError(
                f"cannot read the type hints of tool {self.name!r}: {exc}"
            ) from exc
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for param in inspect.signature(self.fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigurationError(f"tool {self.name!r} may not take *args or **kwargs")
            annotation = hints.get(param.name, Any)
            if annotation is ToolContext:
                self._context_param = param.name
                continue
            if param.name in arg_docs:
                annotation = Annotated[annotation, msgspec.Meta(description=arg_docs[param.name])]
            if param.default is inspect.Parameter.empty:
                fields.append((param.name, annotation))
            else:
                fields.append((param.name, annotation, param.default))
        return msgspec.defstruct(
            f"{self.name}_args", fields, kw_only=True, forbid_unknown_fields=True
        )

    async def run(self, arguments: str, context: ToolContext) -> str:
        """Run the tool with JSON ``arguments`` and return its result as text.

        Invalid arguments and exceptions raised by the tool become an ``Error: …`` text
        for the model; cancellation propagates.
        """
        try:
            args = msgspec.json.decode(arguments or "{}", type=self._args_type)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return f"Error: invalid arguments for {self.name}: {exc}. Call it again with arguments matching its schema."
        kwargs = {f: getattr(args, f) for f in args.__struct_fields__}
        if self._context_param is not None:
            kwargs[self._context_param] = context
        try:
            if self._is_async:
                result = await self.fn(**kwargs)
            else:
                result = await anyio.to_thread.run_sync(lambda: self.fn(**kwargs))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            return f"Error: {type(exc).__name__}: {_describe(exc)}"
        try:
            return _as_text(result)
        except _NotText as exc:
            return f"Error: {self.name} returned {exc.what}; {exc.fix}"
        except (TypeError, ValueError, RecursionError, OverflowError) as exc:
            return (
                f"Error: {self.name} returned a {type(result).__name__} that cannot be "
                f"converted to text ({type(exc).__name__}: {_describe(exc)}); the tool must "
                "return a str or JSON data (dict, list, str, number, bool, None) without cycles"
            )


def tool(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None
) -> Any:
    """Make a `Tool` from a function; usable as ``@tool`` or ``@tool(name=...)``."""
    if fn is not None:
        return Tool(fn, name=name, description=description)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description)

    return wrap


def as_tool(item: Tool | Callable[..., Any]) -> Tool:
    """Return ``item`` as a `Tool`."""
    return item if isinstance(item, Tool) else Tool(item)


class _NotText(Exception):
    """A tool returned bytes that are not UTF-8 text."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what = what
        self.fix = fix


_BYTES = (bytes, bytearray, memoryview)


def _as_text(result: Any) -> str:
    """Return a tool's return value as the text the model receives (see the module docstring).

    Raises:
        _NotText: bytes that are not UTF-8.
        TypeError, ValueError, RecursionError, OverflowError: JSON cannot hold the value.
    """
    if result is None:
        return ""
    if isinstance(result, str):
        return clean_text(result)
    if isinstance(result, _BYTES):
        return _decoded(result)
    plain = msgspec.to_builtins(result, builtin_types=_BYTES, enc_hook=str)
    return msgspec.json.encode(_cleaned(plain)).decode()


def _decoded(data: bytes | bytearray | memoryview) -> str:
    try:
        return clean_text(bytes(data).decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise _NotText(
            f"{len(data)} bytes that are not UTF-8 text (invalid at byte {exc.start})",
            "a tool must return text: decode the data itself, or return it base64-encoded "
            "or described as a str",
        ) from exc


def _cleaned(value: Any) -> Any:
    """Clean every str and decode every bytes value of a `msgspec.to_builtins` result."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, _BYTES):
        return _decoded(value)
    if isinstance(value, list):
        return [_cleaned(v) for v in value]
    if isinstance(value, dict):
        return {_cleaned(k): _cleaned(v) for k, v in value.items()}
    return value


def _describe(exc: BaseException) -> str:
    """Return ``str(exc)`` as clean text, even when the exception's ``__str__`` fails."""
    try:
        return clean_text(str(exc))
    except Exception:
        return f"(the {type(exc).__name__} could not be shown as text)"


def _json_schema(args_type: type[msgspec.Struct]) -> dict[str, Any]:
    (ref,), components = msgspec.json.schema_components([args_type], ref_template="#/$defs/{name}")
    name = ref["$ref"].rsplit("/", 1)[-1]
    schema: dict[str, Any] = dict(components.pop(name))
    schema.pop("title", None)
    schema.setdefault("properties", {})
    if components:
        schema["$defs"] = components
    return schema


_ARGS_HEADER = re.compile(r"^(Args|Arguments|Parameters):\s*$")
_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:\s*$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Return the summary paragraph and the ``Args:`` descriptions of a Google docstring."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line.strip()):
            break
        summary.append(line.strip())
    args: dict[str, str] = {}
    inside = False
    current: str | None = None
    arg_indent = -1
    for line in lines:
        stripped = line.strip()
        if _ARGS_HEADER.match(stripped):
            inside = True
            continue
        if inside:
            if not line.startswith((" ", "\t")) and stripped:
                break
            match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            indent = len(line) - len(line.lstrip())
            if match and (arg_indent < 0 or indent == arg_indent):
                arg_indent = indent
                current = match.group(1)
                args[current] = match.group(2).strip()
            elif current is not None and stripped:
                args[current] = f"{args[current]} {stripped}".strip()
    return " ".join(summary), args
