"""Large images in tool results: which ones leave the request, where their bytes go.

A tool (a browser's screenshot, a chart, a photo) may return an image as a content part
holding a base64 data URL — OpenAI's ``{"type": "image_url", "image_url": {"url":
"data:image/png;base64,…"}}`` (or ``input_image``), or Anthropic's ``{"type": "image",
"source": {"type": "base64", "media_type": …, "data": …}}``. Such a part costs the model
at most ~1,600 tokens (providers scale images to about 1.15 megapixels), but every one of
its bytes travels with every later request of the session, and a request over the
provider's size limits (Anthropic: 5 MB per image, 32 MB per request) is refused.

`ToolResultOffload` writes the decoded bytes of an image over its threshold to the
session's offload folder — the same ``<folder>/<session key>/`` as text results, under a
128-bit key of the call id, the message id, the part's position and the bytes, with the
extension of its media type — and puts a one-line placeholder in its place naming the
file, its size, its dimensions when the header gives them, and how to see it again:
``read_file`` on that path attaches the image to its result (`attached`).

Nothing is lost: an image whose base64 does not decode, whose media type is not a known
raster format, or whose file cannot be written stays in the request as it was, and the
request records why (``tool_image_offload_failed:<call id>:<image number>:<reason>``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio.to_thread
import msgspec

from harness.manifest import Transform, TransformKind
from harness.markers import IMAGES_OFFLOADED
from harness.messages import ContentPart, Message
from harness.tokens import image_size
from harness.workspace import scope_key

TOOL_IMAGE_OFFLOAD: Final = TransformKind("tool_image_offload")
"""Large images of a tool result moved to files: ``tool_image_offload:<call id>:<count>``."""
TOOL_IMAGE_OFFLOAD_FAILED: Final = TransformKind("tool_image_offload_failed")
"""An image that stayed in place: ``tool_image_offload_failed:<call id>:<n>:<reason>``."""

EXTENSIONS: Final = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/jpg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/bmp": "bmp",
    "image/tiff": "tiff",
    "image/heic": "heic",
    "image/heif": "heif",
    "image/avif": "avif",
}
"""The raster media types an image is offloaded as, and their file extensions."""
_MAGIC: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)
_NAMES: Final = {"image/jpeg": "JPEG", "image/jpg": "JPEG"}


class Found(msgspec.Struct, frozen=True, gc=False):
    """An inline base64 image found in a content part."""

    media_type: str
    """The media type the part declares (``""`` when it declares none)."""
    payload: str
    """The base64 text."""


def inline_image(part: ContentPart) -> Found | None:
    """Return the base64 image of ``part``, or ``None`` (text, a remote URL, audio …)."""
    data = part.data
    if not data or part.type not in ("image_url", "image", "input_image"):
        return None
    url: Any = data.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if isinstance(url, str) and url.startswith("data:"):
        head, comma, payload = url.partition(",")
        options = head[5:].split(";")
        if comma and "base64" in options[1:]:
            return Found(options[0].strip().lower(), payload)
        return None
    source = data.get("source")
    if isinstance(source, dict) and source.get("type", "base64") == "base64":
        data_text = source.get("data")
        media = source.get("media_type")
        if isinstance(data_text, str):
            return Found(media.strip().lower() if isinstance(media, str) else "", data_text)
    return None


def decoded_size(payload: str) -> int:
    """Return an upper bound of the bytes ``payload`` decodes to (no decoding)."""
    return len(payload) * 3 // 4


def media_type(data: bytes) -> str | None:
    """Return the raster media type of file bytes, read from their first bytes.

    ``None``: not an image ``read_file`` attaches (text, SVG, a PDF …), whatever the
    file's name says.
    """
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand in (b"avif", b"avis"):
            return "image/avif"
        if brand in (b"heic", b"heix", b"heim", b"heis", b"mif1", b"msf1"):
            return "image/heic"
    return None


def describe(kind: str, data: bytes) -> str:
    """Return ``a 1,920×1,080 PNG image (2,345,678 bytes)``: what a placeholder says of it."""
    name = _NAMES.get(kind, kind.removeprefix("image/").upper())
    size = image_size(data)
    shape = f"{size[0]}×{size[1]} " if size is not None and min(size) > 0 else ""
    return f"a {shape}{name} image ({len(data):,} bytes)"


def attached(path: str, data: bytes, kind: str) -> tuple[ContentPart, ...]:
    """Return what ``read_file`` answers for an image file: a header line and the image."""
    url = f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"
    return (
        ContentPart(type="text", text=f"[{path}: {describe(kind, data)}, attached below]"),
        ContentPart(type="image_url", data={"image_url": {"url": url}}),
    )


class Outcome(msgspec.Struct, gc=False):
    """What offloading one tool result's images did."""

    message: Message
    """The result to send: a revised copy when an image was offloaded, else the same one."""
    transforms: list[Transform]
    """What the manifest records (offloads and images left in place)."""
    offloaded: int = 0
    """How many images were written to files."""


Store = Callable[[str, bytes], Awaitable[str | None]]
"""Writes bytes to a workspace path; returns ``None``, or why it could not."""


async def offload_images(
    message: Message,
    *,
    key: str,
    folder: str,
    too_big: Callable[[ContentPart, Found], bool],
    store: Store | None,
) -> Outcome:
    """Write the images of ``message`` that ``too_big`` picks, and put placeholders in.

    Args:
        message: a tool result whose content is a tuple of parts.
        key: the call's label for the manifest.
        folder: the session's offload folder (``<offload folder>/<session key>``).
        too_big: whether an image part must leave the request.
        store: how to write a file (``None``: there is no workspace).
    """
    content = message.content
    if not isinstance(content, tuple):
        return Outcome(message, [])
    parts = list(content)
    paths: list[str] = []
    transforms: list[Transform] = []
    number = 0
    for position, part in enumerate(content):
        found = inline_image(part)
        if found is None:
            continue
        number += 1
        if not too_big(part, found):
            continue
        decoded = await anyio.to_thread.run_sync(_decode, found.payload)
        reason: str | None
        if decoded is None:
            reason = "bad_base64"
        else:
            data, digest = decoded
            kind = found.media_type if found.media_type in EXTENSIONS else media_type(data)
            if kind is None or kind not in EXTENSIONS:
                reason = "unknown_type"
            else:
                name = scope_key(
                    "image", message.tool_call_id or "", message.id, str(position), digest
                )
                path = f"{folder}/{name}.{EXTENSIONS[kind]}"
                reason = "no_workspace" if store is None else await store(path, data)
                if reason is None:
                    parts[position] = ContentPart(type="text", text=_placeholder(path, kind, data))
                    paths.append(path)
        if reason is not None:
            transforms.append(Transform(TOOL_IMAGE_OFFLOAD_FAILED, f"{key}:{number}:{reason}"))
    if not paths:
        return Outcome(message, transforms)
    revised = message.revise(
        "image_offload",
        metadata={IMAGES_OFFLOADED: [*(message.meta(IMAGES_OFFLOADED) or ()), *paths]},
        content=tuple(parts),
    )
    transforms.insert(0, Transform(TOOL_IMAGE_OFFLOAD, f"{key}:{len(paths)}"))
    return Outcome(revised, transforms, len(paths))


def _decode(payload: str) -> tuple[bytes, str] | None:
    """Return the bytes of base64 ``payload`` and their hash, or ``None`` if it is not base64."""
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        try:  # line-wrapped base64 (MIME style) is still base64
            data = base64.b64decode("".join(payload.split()), validate=True)
        except (binascii.Error, ValueError):
            return None
    if not data:
        return None
    return data, hashlib.blake2b(data, digest_size=16).hexdigest()


def _placeholder(path: str, kind: str, data: bytes) -> str:
    # The path once: its two 32-hex keys are most of the placeholder's tokens.
    return (
        f"[Image offloaded to keep the request small: {describe(kind, data)}. To see it "
        f'again, call read_file(path="{path}"), which attaches it.]'
    )


__all__ = [
    "EXTENSIONS",
    "TOOL_IMAGE_OFFLOAD",
    "TOOL_IMAGE_OFFLOAD_FAILED",
    "Found",
    "Outcome",
    "attached",
    "decoded_size",
    "describe",
    "inline_image",
    "media_type",
    "offload_images",
]
