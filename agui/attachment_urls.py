"""An attachment whose source is a ``url`` that is not its sender's own upload (AG-UI 1.0 lets a
client name an image or a document by address): Threadline fetches it once, under web_fetch's guard
(orchestrator/tools/web.py ``fetch_file``: no private address unless WEB_ALLOWED_PRIVATE_HOSTS
names the host, redirects only on its site, WEB_FETCH_TIMEOUT_SECONDS), and holds it to the limits
of an attachment sent inline (ATTACHMENT_TYPES, ATTACHMENT_MAX_BYTES). What it fetched is stored as
an upload of the sender's, and the message names that copy: the model reads what was fetched, and a
reloaded page shows it from Threadline, never from the address again. Any failure refuses the
message with a 4xx, before anything of it is stored."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ag_ui.core import TextPart, UrlSource, UserMessage
from django.conf import settings

from agents.runtime import web_config
from agui.attachments import AttachmentRefused
from orchestrator.tools.errors import ToolError
from orchestrator.tools.web import FileTooLarge, fetch_file
from threads.services.attachments import uploaded_id


@dataclass(slots=True, frozen=True)
class Fetched:
    """A file fetched for a message's part: its address, media type and bytes."""

    url: str
    media_type: str
    data: bytes


async def attachments_fetch(message: UserMessage) -> list[Fetched] | AttachmentRefused:
    """Each ``url`` source of ``message`` that is not an upload of Threadline's, fetched and checked;
    or why the message is refused (413 too large, 415 a type not taken, 400 for anything else)."""
    if isinstance(message.content, str):
        return []
    fetched: list[Fetched] = []
    for index, part in enumerate(message.content):
        if isinstance(part, TextPart) or not isinstance(part.source, UrlSource) or uploaded_id(part.source.value):
            continue
        field, url = f"content[{index}]", part.source.value
        try:
            media_type, data = await fetch_file(url, web_config(), max_bytes=settings.ATTACHMENT_MAX_BYTES)
        except FileTooLarge:
            limit = settings.ATTACHMENT_MAX_BYTES
            return AttachmentRefused(
                413, "attachment_too_large", f"the {part.type} at {url} is over the limit of {limit} bytes", field
            )
        except ToolError as exc:
            return AttachmentRefused(400, "attachment_url_refused", f"the {part.type} was not fetched: {exc}", field)
        media_type = media_type or (part.source.mime_type or "").lower()
        if media_type not in settings.ATTACHMENT_TYPES or (part.type == "image") != media_type.startswith("image/"):
            taken = ", ".join(sorted(settings.ATTACHMENT_TYPES))
            return AttachmentRefused(
                415,
                "unsupported_attachment",
                f"the {part.type} at {url} is of type {media_type or 'unknown'!r}, which is not taken "
                f"(images and documents of: {taken})",
                field,
            )
        fetched.append(Fetched(url=url, media_type=media_type, data=data))
    return fetched


def sources_rename(message: dict[str, Any], renamed: dict[str, tuple[str, str]]) -> None:
    """Points the message's parts at the stored copies: ``renamed`` maps an address to the copy's
    address and media type."""
    content = message.get("content")
    for part in content if isinstance(content, list) else ():
        source = part.get("source") if isinstance(part, dict) else None
        if isinstance(source, dict) and source.get("type") == "url" and source.get("value") in renamed:
            source["value"], source["mimeType"] = renamed[source["value"]]
