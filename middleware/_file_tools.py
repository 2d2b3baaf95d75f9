"""The ``read_file`` tool: read a workspace file page by page.

The model uses it to fetch the details of an offloaded tool result (see
`middleware.tool_result_offload`) or any other workspace file. Pages are counted in
**characters**, not lines: offloaded results are often logs or JSON with a few enormous
lines, and a character page has a size the model can budget for. Every page starts with a
one-line header giving the range, the file's total size and the offset of the next page.

Paths are workspace-relative and cannot leave the workspace: ``..``, absolute paths and
symlinks that point outside are refused (`Workspace.resolve`). A *private folder* (the
offload folder) holds one sub-folder per user and session, named by `session_key`; a
session may only read its own. The scoped memory folder (``memory/``, see
`harness.memory`) is never opened: its files reach the context through the
workspace-materials middleware, each user's only to that user.
"""

from __future__ import annotations

import os
from typing import Annotated

import msgspec

from harness.errors import ConfigurationError, PathEscapeError, WorkspaceError
from harness.memory import MEMORY_FOLDER
from harness.tools import Tool, ToolContext
from harness.workspace import Workspace, scope_key

DEFAULT_PAGE_CHARS = 20_000
"""Characters `read_file` returns when the model gives no ``limit``."""
MAX_PAGE_CHARS = 100_000
"""The default cap on ``limit``, so one page cannot flood the context."""

Offset = Annotated[int, msgspec.Meta(ge=0)]
Limit = Annotated[int, msgspec.Meta(ge=1)]


def session_key(session_id: str, user_id: str = "") -> str:
    """Return the folder name of a user's session in a private folder (32 hex characters).

    A 128-bit hash of both ids (`harness.workspace.scope_key`), so that no id (which may
    hold user data or path characters) ever becomes part of a path, and two users who
    happen to use the same session id never share a folder.
    """
    return scope_key("session", user_id, session_id)


def read_file_tool(
    *,
    workspace: Workspace | None = None,
    fallback: Workspace | None = None,
    private_folder: str | None = None,
    memory_folder: str | None = MEMORY_FOLDER,
    max_limit: int = MAX_PAGE_CHARS,
) -> Tool:
    """Return a ``read_file`` tool.

    Args:
        workspace: the workspace to read; ``None`` uses the agent's (``ToolContext.workspace``).
        fallback: the workspace to read when neither ``workspace`` nor the agent has one.
        private_folder: a workspace folder whose sub-folders are per user and session
            (named by `session_key`); reads of another session's sub-folder are refused.
        memory_folder: the scoped memory folder, which is never read (``None``: no such
            folder).
        max_limit: the most characters one page may hold.

    Raises:
        ConfigurationError: when ``max_limit`` is not a positive int or ``private_folder``
            is not a plain relative folder name.
    """
    if not isinstance(max_limit, int) or isinstance(max_limit, bool) or max_limit < 1:
        raise ConfigurationError(f"max_limit must be a positive int, got {max_limit!r}")
    private = _parts(private_folder) if private_folder is not None else None
    memory = _parts(memory_folder) if memory_folder is not None else None

    async def read_file(
        path: str, ctx: ToolContext, offset: Offset = 0, limit: Limit = DEFAULT_PAGE_CHARS
    ) -> str:
        """Read a text file of the workspace, one page of characters at a time.

        Args:
            path: the file's path relative to the workspace root.
            ctx: filled in by the agent (not shown to the model).
            offset: the first character to return (0-based).
            limit: how many characters to return (default 20000; larger values are capped).
        """
        chosen = workspace or ctx.workspace or fallback
        if chosen is None:
            raise WorkspaceError(
                "this agent has no workspace, so there are no files to read; "
                "give the agent a workspace (HarnessAgent(workspace=...))"
            )
        relative = _checked(chosen, path, private, memory, ctx)
        text = await chosen.aread_text(relative)
        return page(text, relative, offset=offset, limit=min(limit, max_limit))

    return Tool(read_file, description=_DESCRIPTION)


_DESCRIPTION = (
    "Read a text file of the workspace, one page of characters at a time. The answer "
    "starts with a header line giving the character range, the file's total size and the "
    "offset of the next page; call again with that offset until the header says "
    "'end of file'."
)


def page(text: str, path: str, *, offset: int, limit: int) -> str:
    """Return one page of ``text`` with its header line (what ``read_file`` answers)."""
    total = len(text)
    if offset > 0 and offset >= total:
        return (
            f"[{path}: offset {offset:,} is past the end; the file has {total:,} characters. "
            f"Read from an offset below {total:,}.]\n"
        )
    end = min(total, offset + limit)
    where = "end of file" if end >= total else f"next offset: {end}"
    header = f"[{path}: characters {offset:,}–{end:,} of {total:,}; {where}]"
    return f"{header}\n{text[offset:end]}"


def relative_folder(folder: str) -> str:
    """Return ``folder`` normalised (``a/b``) when it is a plain folder inside a workspace.

    Raises:
        ConfigurationError: when it is empty, absolute or contains ``..``.
    """
    return "/".join(_parts(folder))


def _parts(folder: str) -> tuple[str, ...]:
    if not isinstance(folder, str):
        raise ConfigurationError(f"a folder must be a string, got {folder!r}")
    parts = tuple(p for p in folder.replace("\\", "/").split("/") if p not in ("", "."))
    if not parts or folder.startswith(("/", "\\")) or ".." in parts or ":" in folder:
        raise ConfigurationError(
            f"folder {folder!r} must be a relative folder inside the workspace, "
            "such as 'large_tool_results'"
        )
    return parts


def _checked(
    ws: Workspace,
    path: str,
    private: tuple[str, ...] | None,
    memory: tuple[str, ...] | None,
    ctx: ToolContext,
) -> str:
    """Return ``path`` when the caller may read it; raise otherwise."""
    full = ws.resolve(path)  # refuses '..', absolute paths and symlinks out
    if private is None and memory is None:
        return path
    # Compare the real location, so a symlink inside the workspace cannot reach another
    # session's folder either.
    real = ws.relative(os.path.realpath(full)) if ws.local else ws.relative(full)
    parts = tuple(p for p in real.split("/") if p)
    if private is not None:
        n = len(private)
        mine = session_key(ctx.session_id, ctx.user_id)
        if parts[:n] == private and (len(parts) <= n or parts[n] != mine):
            raise PathEscapeError(
                f"{path!r} belongs to another session's offloaded results; read only the "
                "paths given in this conversation"
            )
    if memory is not None and parts[: len(memory)] == memory:
        raise PathEscapeError(
            f"{path!r} is in the long-term memory folder, which read_file does not open; "
            "the memory this conversation may see is already in its context"
        )
    return path


__all__ = [
    "DEFAULT_PAGE_CHARS",
    "MAX_PAGE_CHARS",
    "page",
    "read_file_tool",
    "relative_folder",
    "session_key",
]
