"""The ``read_file`` tool: read a workspace file page by page.

The model uses it to fetch the details of an offloaded tool result (see
`middleware.tool_result_offload`) or a file of the project. Pages are counted in
**characters**, not lines: offloaded results are often logs or JSON with a few enormous
lines, and a character page has a size the model can budget for. Every page starts with a
one-line header giving the range, the file's total size and the offset of the next page.

Paths are workspace-relative and cannot leave the workspace: ``..``, absolute paths and
symlinks that point outside are refused (`Workspace.resolve`). Inside it, a read is allowed
only into this session's own areas — its offloaded results, its user's memory — and the
shared project material (`middleware._read_scope.ReadScope`); the session store (a SQLite
file and its journals wherever it lies), ``.harness/`` and every other user's or session's
folder are refused, through symlinks, hard links, ``..`` or another letter case too. A
refused read is an ``Error: PathEscapeError: …`` result the model can act on, and says the
same whether or not the file exists.

**An image file** (PNG, JPEG, GIF, WebP … by its first bytes, whatever its name) is
not paged as text: the result is a header line and the image itself, as an ``image_url``
part with a base64 data URL, so the model sees an image `ToolResultOffload` took out of an
earlier result again (``offset`` and ``limit`` do not apply). One over
`MAX_IMAGE_BYTES` (OpenAI's limit per image) is refused with a message saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final

import anyio.to_thread
import msgspec

from harness.errors import ConfigurationError, WorkspaceError
from harness.messages import ContentPart, ToolSchema
from harness.tools import Tool, ToolContext
from harness.workspace import Workspace
from middleware.memory import MEMORY_FOLDER
from middleware.tool_result_offload._images import attached, describe, media_type
from middleware.tool_result_offload._read_scope import ReadScope, session_key

DEFAULT_PAGE_CHARS = 20_000
"""Characters `read_file` returns when the model gives no ``limit``."""
MAX_PAGE_CHARS = 100_000
"""The default cap on ``limit``, so one page cannot flood the context."""
MAX_IMAGE_BYTES = 20_000_000
"""The largest image file `read_file` attaches (OpenAI's limit per image; Anthropic's is 5 MB)."""

Offset = Annotated[int, msgspec.Meta(ge=0)]
Limit = Annotated[int, msgspec.Meta(ge=1)]


def read_file_tool(
    *,
    workspace: Workspace | None = None,
    fallback: Workspace | None = None,
    private_folder: str | None = None,
    memory_folder: str | None = MEMORY_FOLDER,
    shared: Sequence[str] | None = None,
    max_limit: int = MAX_PAGE_CHARS,
) -> Tool:
    """Return a ``read_file`` tool.

    Args:
        workspace: the workspace to read; ``None`` uses the agent's (``ToolContext.workspace``).
        fallback: the workspace to read when neither ``workspace`` nor the agent has one.
        private_folder: a workspace folder whose sub-folders are per user and session
            (named by `session_key`); reads of another session's sub-folder are refused.
        memory_folder: the scoped memory folder (`harness.memory.memory_path`): only the
            calling user's own files (and the agent's shared ones) are read (``None``: no
            such folder).
        shared: the folders of project material every session may read (``None``: the
            whole workspace outside the private areas; ``[]``: none, only the session's own
            areas).
        max_limit: the most characters one page may hold.

    Raises:
        ConfigurationError: when ``max_limit`` is not a positive int, or ``private_folder``,
            ``memory_folder`` or a ``shared`` entry is not a plain relative folder name.
    """
    if not isinstance(max_limit, int) or isinstance(max_limit, bool) or max_limit < 1:
        raise ConfigurationError(f"max_limit must be a positive int, got {max_limit!r}")
    private = _parts(private_folder) if private_folder is not None else None
    memory = _parts(memory_folder) if memory_folder is not None else None
    if isinstance(shared, str):
        raise ConfigurationError(
            f"shared must be a list of folders, e.g. ['docs', 'src'], got the string {shared!r}"
        )
    areas = ((),) if shared is None else tuple(_parts(folder) for folder in shared)

    async def read_file(
        path: str, ctx: ToolContext, offset: Offset = 0, limit: Limit = DEFAULT_PAGE_CHARS
    ) -> str | tuple[ContentPart, ...]:
        """Read a text file of the workspace, one page of characters at a time; or an image.

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
        scope = ReadScope(chosen, ctx, offload=private, memory=memory, shared=areas)
        data = await anyio.to_thread.run_sync(chosen.read_checked, path, scope)
        scope.check_content(path, data[:16])
        kind = media_type(data)
        if kind is not None:
            if len(data) > MAX_IMAGE_BYTES:
                raise WorkspaceError(
                    f"{path!r} is {describe(kind, data)}, larger than the {MAX_IMAGE_BYTES:,} "
                    "bytes an image may have to be attached; ask the user to look at it"
                )
            return attached(path, data, kind)
        return page(_decoded(data), path, offset=offset, limit=min(limit, max_limit))

    return Tool(read_file, description=_DESCRIPTION)


_DESCRIPTION = (
    "Read a text file of the workspace, one page of characters at a time. The answer "
    "starts with a header line giving the character range, the file's total size and the "
    "offset of the next page; call again with that offset until the header says "
    "'end of file'."
)
"""Images are not mentioned: the placeholder of an offloaded image says what read_file does
with it, and the schema every request carries stays as short as it was."""


COMPACT_READER: Final = ToolSchema(
    name="read_file",
    description=(
        "Read a text file of the workspace, a page of characters at a time; the header line "
        "gives the next offset."
    ),
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "limit": {"type": "integer", "minimum": 1, "default": DEFAULT_PAGE_CHARS},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)
"""The ``read_file`` schema offered in small windows: the same tool and arguments, about
half the tokens of the full one (no argument descriptions)."""


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


def _decoded(data: bytes) -> str:
    """Return file bytes as text, as `Workspace.read_text` does."""
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


__all__ = [
    "DEFAULT_PAGE_CHARS",
    "MAX_IMAGE_BYTES",
    "MAX_PAGE_CHARS",
    "page",
    "read_file_tool",
    "relative_folder",
    "session_key",
]
