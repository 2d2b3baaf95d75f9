"""How a LangChain agent reads back what the stack took out of its request: ``read_file``.

Used by `harness.adapters.langchain` only. The stack offloads a large tool result to a
workspace file and shows the model a preview naming ``read_file(path=...)``; it trims old
results to a head. A LangChain agent has no such tool of its own, so `HarnessMiddleware`
contributes one (`read_tool`) and gives the stack a workspace (default: a private in-memory
one per middleware). Without both the pointer would dangle.

Scope: the file of a result lives under the key of its user and conversation
(`middleware.tool_result_offload.offload_path`), and the tool reads through the same
allow-list as our agent's ``read_file`` (`middleware.tool_result_offload.read_file_tool`,
only this conversation's offload folder), so another user or conversation cannot read it.
The conversation is LangGraph's ``thread_id``; a run without a checkpointer has none, and
its first message's id (LangGraph gives each message a random one) stands for it.

A trimmed result (compaction's first stage) names where its original is: the adapter
writes the original to the same folder and rewrites the trim note to name that file
(`readable_trims`), never making the message longer in tokens than the stack left it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final

import anyio.to_thread
import msgspec
from langchain.agents.middleware import ToolCallRequest
from langchain.tools import ToolRuntime
from langchain_core.messages import AnyMessage
from langchain_core.messages import ToolCall as LCToolCall
from langchain_core.tools import BaseTool, StructuredTool

from harness.errors import WorkspaceError
from harness.markers import OFFLOADED, ORIGIN_ID, TRIMMED
from harness.messages import Message, ToolCall
from harness.request import ModelRequest, ModelResponse, RunScope
from harness.state import AgentState, SessionKey
from harness.tokens import TokenEstimator
from harness.tools import ToolContext, run_tool
from harness.types import Handler
from harness.workspace import Workspace
from middleware.tool_result_offload import offload_path
from middleware.tool_result_offload._read_file import DEFAULT_PAGE_CHARS, read_file_tool
from middleware.tool_result_offload._read_scope import session_key

__all__ = [
    "CONVERSATION",
    "ConversationScope",
    "conversation_of",
    "langchain_read_tool",
    "readable_trims",
    "reader_needed",
]

TRIM_NOTE: Final = "\n[… older tool output trimmed:"
"""How compaction's trim note starts (`middleware.compaction`): what `readable_trims` rewrites."""

CONVERSATION: ContextVar[tuple[str, Workspace | None]] = ContextVar(
    "harness.adapters.langchain.conversation", default=("", None)
)
"""The conversation a request is prepared for, and the workspace its offloads go to (``None``:
the request has no ``read_file`` to read them, so they stay inline). Set around each run."""


def conversation_of(runtime: Any, messages: Sequence[AnyMessage]) -> str:
    """Return the id of the conversation a model or tool call belongs to.

    LangGraph's ``thread_id`` when the run has one; else the id LangGraph gave the
    conversation's first message; else ``""``.
    """
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread is None:
        config = getattr(runtime, "config", None)
        configurable = config.get("configurable") if isinstance(config, Mapping) else None
        thread = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    if thread is not None and str(thread):
        return f"thread:{thread}"
    first = messages[0].id if messages else None
    return f"message:{first}" if first else ""


class ConversationScope:
    """The outermost layer of the adapter's stack: the conversation's id and the workspace.

    Stateless calls carry no session id; this one names the LangGraph conversation
    (`CONVERSATION`), so offloads are filed per conversation, and gives the call the
    workspace ``read_file`` reads — only when the request offers that tool: without it the
    offload layer finds no workspace and keeps an inline head and tail, never a pointer.
    """

    async def __call__(self, request: ModelRequest, call_next: Handler) -> ModelResponse:
        """Name the conversation and the workspace on ``request``, then pass it on."""
        conversation, workspace = CONVERSATION.get()
        ids = msgspec.structs.replace(request.ids, session_id=conversation)
        run = request.run
        if run is not None and run.workspace is None and workspace is not None:  # a copy
            run = msgspec.structs.replace(run, workspace=workspace)
        return await call_next(request.replace(ids=ids, run=run))


def langchain_read_tool(
    workspace: Workspace,
    *,
    folder: str,
    agent_id: str,
    user_of: Callable[[Any], str] | None,
) -> BaseTool:
    """Return the LangChain ``read_file`` tool that pages this conversation's offloads.

    Args:
        workspace: the workspace the offloads are written to.
        folder: the offload folder in it.
        agent_id: the middleware's agent id (keys a conversation without a user).
        user_of: the middleware's ``user_of``, called with LangChain's ``ToolCallRequest``.
    """
    harness_tool = read_file_tool(
        workspace=workspace, private_folder=folder, memory_folder=None, shared=[]
    )

    async def read_file(
        path: str, runtime: ToolRuntime[Any, Any], offset: int = 0, limit: int = DEFAULT_PAGE_CHARS
    ) -> str | list[Any]:
        state = runtime.state if isinstance(runtime.state, Mapping) else {}
        messages = state.get("messages") or []
        user = ""
        if user_of is not None:
            call = LCToolCall(name="read_file", args={"path": path}, id=runtime.tool_call_id)
            user = user_of(ToolCallRequest(tool_call=call, tool=None, state=state, runtime=runtime))
        session = conversation_of(runtime, messages)
        arguments = json.dumps({"path": path, "offset": offset, "limit": limit})
        context = ToolContext(
            state=AgentState(session_id=session),
            call=ToolCall(id=runtime.tool_call_id or "", name="read_file", arguments=arguments),
            workspace=workspace,
            run=RunScope(key=SessionKey(user, agent_id, session), workspace=workspace),
            user_id=user,
            session_id=session,
        )
        content = await run_tool(harness_tool, arguments, context)
        if isinstance(content, str):
            return content
        # An image file: LangChain takes OpenAI-style content blocks as a tool's content.
        blocks: list[Any] = Message(role="tool", content=content).to_openai()["content"]
        return blocks

    def read_file_sync(
        path: str, runtime: ToolRuntime[Any, Any], offset: int = 0, limit: int = DEFAULT_PAGE_CHARS
    ) -> str | list[Any]:
        from harness.adapters.langchain import run_sync

        return run_sync(lambda: read_file(path, runtime, offset, limit))

    return StructuredTool.from_function(
        func=read_file_sync,
        coroutine=read_file,
        name="read_file",
        description=(
            "Read a tool result that was too long for the context (or trimmed), one page of "
            "characters at a time, from the path its preview names. The answer starts with "
            "a header giving the character range, the total size and the next offset; call "
            "again with that offset until the header says 'end of file'."
        ),
    )


async def readable_trims(
    rendered: Sequence[Message],
    originals: Mapping[str, Message],
    *,
    workspace: Workspace | None,
    folder: str,
    user_id: str,
    agent_id: str,
    session_id: str,
    estimator: TokenEstimator,
) -> list[Message]:
    """Return ``rendered`` with every pointer to a result's original one this conversation reads.

    - A trimmed result: its original (``originals`` by the copy's ``origin_id``) is written
      once to the conversation's offload folder and the trim note becomes a ``read_file``
      call for the rest; the head is shortened when needed so that the message never costs
      more tokens than the stack left it.
    - An offloaded result whose file is another conversation's (the stateless prefix cache
      serves a conversation that began like an earlier one the version made for that one):
      the original is filed under this conversation too and the preview names that file,
      a path of the same length.

    Without a ``workspace`` (the agent has no ``read_file``) a trim note says that the rest
    is not available to the agent.
    """
    out = list(rendered)
    own = f"{folder}/{session_key(session_id, user_id, agent_id)}/"
    for index, message in enumerate(rendered):
        if message.role != "tool":
            continue
        text = message.content
        original = originals.get(str(message.meta(ORIGIN_ID, "")))
        if original is None or not isinstance(text, str):
            continue
        offloaded = message.meta(OFFLOADED)
        if not (message.meta(TRIMMED) and TRIM_NOTE in text) and not (
            isinstance(offloaded, str) and not offloaded.startswith(own)
        ):
            continue
        if workspace is None:
            if not isinstance(offloaded, str):
                out[index] = _trim_note(message, text, None, len(original.text), estimator)
            continue
        data = original.text.encode("utf-8", "surrogatepass")
        path = offload_path(
            original, session_id=session_id, user_id=user_id, agent_id=agent_id,
            data=data, folder=folder,
        )  # fmt: skip
        if not await anyio.to_thread.run_sync(workspace.exists, path):
            await workspace.awrite_bytes(path, data)
        if isinstance(offloaded, str):
            out[index] = message.replace(
                content=text.replace(offloaded, path),
                metadata={**(message.metadata or {}), OFFLOADED: path},
            )
        else:
            out[index] = _trim_note(message, text, path, len(original.text), estimator)
    return out


async def reader_needed(
    rendered: Sequence[Message],
    workspace: Workspace,
    *,
    folder: str,
    user_id: str,
    agent_id: str,
    session_id: str,
) -> bool:
    """Return whether the model needs ``read_file``: the conversation has a file to read.

    A message of ``rendered`` names one (an offload preview or a readable trim note, after
    `readable_trims`), or the conversation's offload folder exists: something was filed
    for it in an earlier request (whose preview a summary may have replaced since). Once
    true for a conversation it stays true (its files stay until swept), so the tool does
    not come and go between requests.
    """
    if any(isinstance(m.meta(OFFLOADED), str) for m in rendered if m.role == "tool"):
        return True
    own = f"{folder}/{session_key(session_id, user_id, agent_id)}"
    try:
        return bool(await anyio.to_thread.run_sync(workspace.exists, own))
    except (OSError, WorkspaceError):
        return False


def _trim_note(
    message: Message, text: str, path: str | None, total: int, estimator: TokenEstimator
) -> Message:
    """Return the trimmed ``message`` with a note that names ``path``, no dearer than before."""
    head = text[: text.rindex(TRIM_NOTE)]
    before = estimator.count_message(message)
    while True:
        how = (
            f'read them with read_file(path="{path}", offset={len(head)})'
            if path is not None
            else "they are not available to this agent"
        )
        note = f"\n[… older tool output trimmed: {total - len(head):,} more characters not shown; {how} …]"
        revised = message.replace(content=head + note)
        if not head or estimator.count_message(revised) <= before:
            return revised
        head = head[: len(head) * 3 // 4]
