"""Image tokens: the provider's rule for a non-text part, read from the image's header.

Images (non-text parts) are counted by the provider's rule where it is known (OpenAI:
85 + 170 per 512-px tile; Anthropic: width × height / 750), read from the header of a
base64 data URL (at most `_HEADER_CHARS` characters are decoded, whatever the image's
size); an unknown size or provider counts the largest allowance (`image_tokens`).
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from typing import Any

from harness.messages import ContentPart

OPENAI_LOW_DETAIL = 85
"""Tokens of an OpenAI image at ``detail: low`` (and the base of every image)."""
OPENAI_TILE = 170
"""Tokens per 512-px tile of an OpenAI image at high detail."""
OPENAI_MAX_IMAGE = OPENAI_LOW_DETAIL + OPENAI_TILE * 8
"""The largest OpenAI image: 768 × 2048 after scaling is 2 × 4 tiles (1,445 tokens)."""
ANTHROPIC_MAX_IMAGE = 1600
"""Anthropic's cap: images are scaled to about 1.15 megapixels, ≈ 1,600 tokens."""
IMAGE_BOUND = max(OPENAI_MAX_IMAGE, ANTHROPIC_MAX_IMAGE)
"""What an image of unknown size or for an unknown provider counts: the largest allowance."""
_HEADER_CHARS = 65_536
"""Base64 characters decoded to find an image's size (48 KB: JPEG EXIF blocks come first)."""


def image_size(data: bytes) -> tuple[int, int] | None:
    """Return (width, height) from the header of a PNG, JPEG, GIF or WebP file, else None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        kind = data[12:16]
        if kind == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(
                data[27:30], "little"
            )
        if kind == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return int(width) & 0x3FFF, int(height) & 0x3FFF
        return None
    if data[:2] == b"\xff\xd8":
        i = 2
        while i + 9 < len(data):
            if data[i] != 0xFF:
                i += 1
                continue
            marker = data[i + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
                i += 1 if marker == 0xFF else 2
                continue
            length = int.from_bytes(data[i + 2 : i + 4], "big")
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[i + 5 : i + 9])
                return int(width), int(height)
            i += 2 + length
    return None


def _image_source(part: ContentPart) -> tuple[str | None, str | None]:
    """Return (base64 payload or None, detail or None) of an image part."""
    data = part.data or {}
    detail = None
    payload: str | None = None
    url: Any = data.get("image_url")
    if isinstance(url, dict):
        detail = url.get("detail")
        url = url.get("url")
    if isinstance(url, str) and url.startswith("data:") and "," in url[:200]:
        payload = url[url.index(",") + 1 :]
    source = data.get("source")
    if isinstance(source, dict) and isinstance(source.get("data"), str):
        payload = source["data"]
    return payload, detail if isinstance(detail, str) else None


def openai_image_tokens(width: int, height: int, detail: str | None = None) -> int:
    """Return OpenAI's count: fit in 2048², shortest side to 768, 85 + 170 per 512-px tile."""
    if detail == "low":
        return OPENAI_LOW_DETAIL
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(w, h)
    if min(w, h) > 768:
        w, h = w * 768 / min(w, h), h * 768 / min(w, h)
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return OPENAI_LOW_DETAIL + OPENAI_TILE * tiles


def anthropic_image_tokens(width: int, height: int) -> int:
    """Return Anthropic's count: width × height / 750, after scaling to its 1568-px edge."""
    w, h = float(width), float(height)
    if max(w, h) > 1568:
        w, h = w * 1568 / max(w, h), h * 1568 / max(w, h)
    return min(ANTHROPIC_MAX_IMAGE, math.ceil(w * h / 750))


def image_tokens(part: ContentPart, rule: str) -> int:
    """Return the token count of one non-text part under ``rule`` (openai, anthropic, bound).

    The size comes from the header of a base64 data URL (PNG, JPEG, GIF, WebP). An image of
    unknown size, a remote URL, another kind of part (audio …) or an unknown provider
    counts `IMAGE_BOUND`, the largest allowance; OpenAI's ``detail: low`` counts 85.
    """
    payload, detail = _image_source(part)
    if rule == "openai" and detail == "low":
        return OPENAI_LOW_DETAIL
    size = None
    if payload:
        head = payload[:_HEADER_CHARS]
        head = head[: len(head) - len(head) % 4]
        try:
            size = image_size(base64.b64decode(head))
        except (binascii.Error, ValueError, struct.error):
            size = None
    if size is None or min(size) <= 0:
        return IMAGE_BOUND
    if rule == "openai":
        return openai_image_tokens(*size, detail)
    if rule == "anthropic":
        return anthropic_image_tokens(*size)
    return max(openai_image_tokens(*size), anthropic_image_tokens(*size))


def image_rule(family: str) -> str:
    """Return the image rule of a tokenizer family (``bound`` when the provider's is unknown)."""
    return {"o200k": "openai", "cl100k": "openai", "anthropic": "anthropic"}.get(family, "bound")
