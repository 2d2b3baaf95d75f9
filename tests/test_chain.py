"""The composer: order, per-call binding, and bad stacks."""

from __future__ import annotations

import functools

import pytest

from harness import ConfigurationError, ContextBlock, Message, ModelRequest, ModelResponse, compose
from harness.manifest import Transform
from harness.messages import ToolCall
from harness.types import Handler, Middleware


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        self.log.append(f"{self.name}-before")
        response = await call_next(request.with_transforms(Transform.parse(self.name)))
        self.log.append(f"{self.name}-after")
        return response


async def test_first_in_the_list_is_outermost() -> None:
    log: list[str] = []
    seen: list[tuple[str, ...]] = []

    async def client(request: ModelRequest) -> ModelResponse:
        log.append("client")
        seen.append(request.transforms)
        return ModelResponse(message=Message.assistant("ok"))

    handler = compose([Recorder("outer", log), Recorder("inner", log)], client)
    await handler(ModelRequest(model="m"))
    assert log == ["outer-before", "inner-before", "client", "inner-after", "outer-after"]
    assert seen == [("outer", "inner")]


async def test_a_bare_async_function_is_a_middleware() -> None:
    async def tag(request: ModelRequest, call_next: Handler) -> ModelResponse:
        response = await call_next(request)
        return response.replace(finish_reason="tagged")

    async def client(request: ModelRequest) -> ModelResponse:
        return ModelResponse(message=Message.assistant("ok"))

    response = await compose([tag], client)(ModelRequest(model="m"))
    assert response.finish_reason == "tagged"


async def test_a_composed_handler_can_be_reused() -> None:
    log: list[str] = []

    async def client(request: ModelRequest) -> ModelResponse:
        return ModelResponse(message=Message.assistant("ok"))

    handler = compose([Recorder("a", log)], client)
    await handler(ModelRequest(model="m"))
    await handler(ModelRequest(model="m"))
    assert log == ["a-before", "a-after"] * 2


def test_a_non_callable_in_the_stack_is_a_configuration_error() -> None:
    async def client(request: ModelRequest) -> ModelResponse:
        raise AssertionError("not called")

    with pytest.raises(ConfigurationError, match=r"stack\[1\]"):
        compose([Recorder("a", []), "not a middleware"], client)  # type: ignore[list-item]


class _Tagger:
    """A middleware whose ``__call__`` is a static method: called without the instance."""

    @staticmethod
    async def __call__(request: ModelRequest, call_next: Handler) -> ModelResponse:
        return await call_next(request.with_transforms(Transform.parse("static")))


class _Inherited(Recorder):
    """A middleware whose ``__call__`` comes from its base class."""


async def test_every_kind_of_callable_middleware_is_called_as_python_would() -> None:
    """The composer binds a class's plain ``__call__`` once; other callables run as they are.

    A static ``__call__``, an inherited one, a ``functools.partial`` and a callable
    instance each see the request once, in order, as calling them directly would.
    """
    log: list[str] = []

    async def tagged(request: ModelRequest, call_next: Handler, *, tag: str) -> ModelResponse:
        return await call_next(request.with_transforms(Transform.parse(tag)))

    seen: list[tuple[str, ...]] = []

    async def client(request: ModelRequest) -> ModelResponse:
        seen.append(request.transforms)
        return ModelResponse(message=Message.assistant("ok"))

    stack: list[Middleware] = [
        _Tagger(),
        _Inherited("inherited", log),
        functools.partial(tagged, tag="partial"),
    ]
    await compose(stack, client)(ModelRequest(model="m"))
    assert seen == [("static", "inherited", "partial")]
    assert log == ["inherited-before", "inherited-after"]


async def test_the_innermost_handler_drops_blocks_the_history_supersedes() -> None:
    # A request without blocks reaches the handler as it is (no work); a block whose
    # superseding message is in the history is dropped, one whose message is not is kept.
    seen: list[ModelRequest] = []

    async def handler(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(message=Message.assistant("ok"))

    chain = compose([], handler)
    receipt = Message.tool("c1", "todos: 1", id="receipt")
    call = Message.assistant(None, tool_calls=[ToolCall(id="c1", name="todos", arguments="{}")])
    bare = ModelRequest(model="m", history=(Message.user("go"), call, receipt))
    await chain(bare)
    assert seen[-1] is bare
    shown = ContextBlock.runtime("todos", "1. go", superseded_by="receipt")
    missing = ContextBlock.runtime("plan", "step", superseded_by="gone")
    await chain(bare.replace(blocks=(shown, missing)))
    assert seen[-1].blocks == (missing,)
