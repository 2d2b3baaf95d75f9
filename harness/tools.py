"""Tools: plain Python functions, sync or async, with a JSON schema from their signature.

The schema comes from the type hints (through msgspec), the description and the parameter
descriptions from the docstring — Google, Sphinx (``:param x:``) or NumPy style, read by
the ``docstring_parser`` library. A parameter annotated `ToolContext` is filled in by the
agent and hidden from the model. A tool that raises does not end the agent loop: the model
receives an error result and can react.

Parameters may be structured: msgspec Structs and dataclasses (msgspec decodes and
validates them itself), and pydantic models — their schema is the model's own
(``model_json_schema``), and the arguments are validated into a model instance
(``model_validate``) before the call. pydantic is never imported here: a class can only be
a pydantic model once the application imported pydantic. Arguments that fail validation
are an error result naming each bad field, so the model can call again.

What a tool returns becomes text inside the same error handling, so a value that cannot be
converted is an error result too, never a crash of the loop:

- ``str`` is kept, with lone surrogates cleaned (`harness.messages.clean_text`);
- a `ContentPart`, or a list or tuple of them (a screenshot tool's ``image_url`` part with a
  base64 data URL, say), is kept as content parts (`Tool.run_content`; `Tool.run`, for
  callers that take text only, gives their text and a one-line note per other part);
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
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin, get_type_hints

import anyio.to_thread
import docstring_parser
import msgspec

from harness.errors import ConfigurationError, InvalidInputError
from harness.messages import ContentPart, ToolCall, ToolSchema, checked_parts, clean_text

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
        self._models: dict[str, Any] = {}
        """Parameters that take a pydantic model, by name: validated before each call."""
        self._args_type = self._build_args_type(arg_docs)
        self.schema = ToolSchema(
            name=self.name,
            description=self.description,
            parameters=self._with_model_schemas(_json_schema(self._args_type), arg_docs),
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
            model, optional = _pydantic_model(annotation)
            if model is not None:  # decoded as an object, then validated by the model
                self._models[param.name] = model
                annotation = dict[str, Any] | None if optional else dict[str, Any]
            if param.name in arg_docs:
                annotation = Annotated[annotation, msgspec.Meta(description=arg_docs[param.name])]
            if param.default is inspect.Parameter.empty:
                fields.append((param.name, annotation))
            else:
                fields.append((param.name, annotation, param.default))
        return msgspec.defstruct(
            f"{self.name}_args", fields, kw_only=True, forbid_unknown_fields=True
        )

    def _with_model_schemas(
        self, schema: dict[str, Any], arg_docs: dict[str, str]
    ) -> dict[str, Any]:
        """Put each pydantic parameter's own JSON schema into the tool's ``schema``.

        Raises:
            ConfigurationError: when two models define a ``$defs`` entry of one name
                differently.
        """
        if not self._models:
            return schema
        defs: dict[str, Any] = schema.setdefault("$defs", {})
        for name, model in self._models.items():
            own: dict[str, Any] = dict(model.model_json_schema(ref_template="#/$defs/{model}"))
            for key, value in own.pop("$defs", {}).items():
                if defs.setdefault(key, value) != value:
                    raise ConfigurationError(
                        f"tool {self.name!r}: two argument types define {key!r} differently "
                        "in their JSON schemas; rename one of the models"
                    )
            current = schema["properties"][name]
            if "anyOf" in current:  # Model | None
                own = {"anyOf": [own, {"type": "null"}]}
            if name in arg_docs:
                own["description"] = arg_docs[name]
            if "default" in current:
                own["default"] = current["default"]
            schema["properties"][name] = own
        if not defs:
            del schema["$defs"]
        return schema

    async def run(self, arguments: str, context: ToolContext) -> str:
        """Run the tool with JSON ``arguments`` and return its result as text.

        Invalid arguments and exceptions raised by the tool become an ``Error: …`` text
        for the model; cancellation propagates. A result of content parts (`run_content`)
        gives its text parts, and a one-line note for each other part (an image): for a
        caller that can only pass text on.
        """
        content = await self.run_content(arguments, context)
        return content if isinstance(content, str) else parts_text(content)

    async def run_content(
        self, arguments: str, context: ToolContext
    ) -> str | tuple[ContentPart, ...]:
        """Run the tool with JSON ``arguments`` and return its result: text or content parts.

        Content parts are what the tool returned as `ContentPart` objects (an image the
        model should see), checked; everything else is text (see the module docstring).
        Invalid arguments and exceptions raised by the tool become an ``Error: …`` text
        for the model; cancellation propagates.
        """
        try:
            args = msgspec.json.decode(arguments or "{}", type=self._args_type)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return f"Error: invalid arguments for {self.name}: {exc}. Call it again with arguments matching its schema."
        kwargs = {f: getattr(args, f) for f in args.__struct_fields__}
        for name, model in self._models.items():
            if kwargs[name] is not None:
                problem = _validated(model, kwargs, name)
                if problem is not None:
                    return (
                        f"Error: invalid arguments for {self.name}: {problem}. Call it again "
                        "with arguments matching its schema."
                    )
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
            if _is_parts(result):
                return checked_parts(result if isinstance(result, list | tuple) else (result,))
            return _as_text(result)
        except InvalidInputError as exc:
            return f"Error: {self.name} returned content parts that are not valid: {exc}"
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


async def run_tool(
    tool: Tool, arguments: str, context: ToolContext
) -> str | tuple[ContentPart, ...]:
    """Run ``tool`` for a caller that takes content parts: `Tool.run_content`, unless overridden.

    A subclass that overrides `Tool.run` (text only: the contract before content parts) is
    run through its override, so what it returns is what the model receives.
    """
    if type(tool).run is not Tool.run:
        return await tool.run(arguments, context)
    return await tool.run_content(arguments, context)


def _is_parts(result: Any) -> bool:
    """Whether a tool returned content parts: one `ContentPart`, or a list or tuple of them."""
    if isinstance(result, ContentPart):
        return True
    return (
        isinstance(result, list | tuple)
        and bool(result)
        and all(isinstance(item, ContentPart) for item in result)
    )


def parts_text(parts: tuple[ContentPart, ...]) -> str:
    """Return the text of a content-part result, with a one-line note per non-text part."""
    return "\n".join(
        part.text if part.text is not None else f"[a {part.type} part, not shown as text]"
        for part in parts
    )


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


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Return the summary paragraph and the parameter descriptions of a docstring.

    Google, Sphinx and NumPy styles are told apart by ``docstring_parser``; lines are
    joined, so a description wrapped in the source reads as one sentence.
    """
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError as exc:
        raise ConfigurationError(
            f"cannot read the tool's docstring ({exc}); fix its Args/Parameters section"
        ) from exc
    summary = parsed.short_description or ""
    if parsed.long_description and not parsed.blank_after_short_description:
        summary += "\n" + parsed.long_description.split("\n\n", 1)[0]  # one paragraph
    args = {p.arg_name: _one_line(p.description) for p in parsed.params if p.description}
    return _one_line(summary), args


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _pydantic_model(annotation: Any) -> tuple[Any, bool]:
    """Return the pydantic model ``annotation`` names (or ``None``), and whether it is optional.

    ``Model`` and ``Model | None`` are recognised. pydantic is looked up, not imported: a
    class can only be a pydantic model when the application has imported pydantic.
    """
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:
        return None, False
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        if len(members) != 1:
            return None, False
        annotation, optional = members[0], True
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation, optional
    return None, False


def _validated(model: Any, kwargs: dict[str, Any], name: str) -> str | None:
    """Replace ``kwargs[name]`` by a ``model`` instance; return what was wrong, if anything."""
    pydantic = sys.modules["pydantic"]
    try:
        kwargs[name] = model.model_validate(kwargs[name])
    except pydantic.ValidationError as exc:
        problems = [
            f"`{'.'.join(str(p) for p in (name, *e['loc']))}`: {e['msg']}" for e in exc.errors()
        ]
        return "; ".join(problems)
    return None
