"""What an MCP tool call returned, as the model reads it.

Text stays text; structured content becomes JSON text (once: not when a text block already says
the same); images become image blocks the model sees (with a line of text saying so); embedded
resources and resource links become text; audio is described, not passed. ``isError`` makes the
result a failed tool result. The text is then shaped like every tool's (ToolRegistry.call).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import mcp.types as mcp_types

from orchestrator.tools.base import ToolOutput

# What the model API takes as an image block, and how large one may be (decoded).
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_IMAGE_BYTES = 5 * 1024 * 1024
MAX_IMAGES = 8


def tool_output(result: mcp_types.CallToolResult) -> ToolOutput:
    parts: list[str] = []
    images: list[dict[str, Any]] = []
    for item in result.content:
        parts.append(_content_text(item, images))
    structured = result.structured_content
    if structured is not None and not _already_said(structured, result.content):
        parts.append(json.dumps(structured, ensure_ascii=False, indent=2))
    text = "\n".join(part for part in parts if part)
    if not text and not images:
        text = "(the tool returned nothing)" if not result.is_error else "(the tool failed and said nothing)"
    return ToolOutput(text, bool(result.is_error), images=tuple(images))


def _content_text(item: Any, images: list[dict[str, Any]]) -> str:
    if isinstance(item, mcp_types.TextContent):
        return item.text
    if isinstance(item, mcp_types.ImageContent):
        return _image(item.data, item.mime_type, images)
    if isinstance(item, mcp_types.AudioContent):
        return f"[audio, {item.mime_type}, {_decoded_size(item.data)} bytes: not shown to the model]"
    if isinstance(item, mcp_types.ResourceLink):
        described = f": {item.description}" if item.description else ""
        kind = f", {item.mime_type}" if item.mime_type else ""
        return f"[resource link: {item.name} <{item.uri}>{kind}{described}]"
    if isinstance(item, mcp_types.EmbeddedResource):
        resource = item.resource
        kind = f" ({resource.mime_type})" if resource.mime_type else ""
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource <{resource.uri}>{kind}]\n{resource.text}"
        size = _decoded_size(resource.blob)
        return f"[resource <{resource.uri}>{kind}: {size} bytes of binary data, not shown]"
    return f"[content of type {getattr(item, 'type', type(item).__name__)!r}, not shown]"


def _image(data: str, mime_type: str, images: list[dict[str, Any]]) -> str:
    size = _decoded_size(data)
    if mime_type not in IMAGE_TYPES:
        return f"[image, {mime_type}, {size} bytes: a type the model cannot see]"
    if size < 0:
        return f"[image, {mime_type}: not valid base64, not shown]"
    if size > MAX_IMAGE_BYTES:
        return f"[image, {mime_type}, {size} bytes: over {MAX_IMAGE_BYTES} bytes, not shown]"
    if len(images) >= MAX_IMAGES:
        return f"[image, {mime_type}, {size} bytes: more than {MAX_IMAGES} images, not shown]"
    images.append({"type": "image", "source": {"type": "base64", "media_type": mime_type, "data": data}})
    return f"[image {len(images)}, {mime_type}, {size} bytes: attached]"


def _decoded_size(data: str) -> int:
    """The decoded size of base64 ``data``; -1 when it is not base64."""
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return -1


def _already_said(structured: Any, content: list[Any]) -> bool:
    """The spec asks servers to repeat structured content as a text block; say it once."""
    for item in content:
        if isinstance(item, mcp_types.TextContent):
            try:
                if json.loads(item.text) == structured:
                    return True
            except ValueError:
                continue
    return False
