"""The attachments of a user message (AG-UI 1.0 image and document parts; CopilotKit's
useAttachments sends them inline, base64), checked before anything of the request is stored.

Each must carry its data, or name a file its sender uploaded here (``POST /copilotkit/attachments``,
CopilotKit's ``onUpload``: a ``url`` source with that file's address, whose data the model is sent),
or name another address, which is fetched under web_fetch's guard (agui/attachment_urls.py). Any
other source is refused. Each
must be of a type the model reads (ATTACHMENT_TYPES; an image part an image, a document part not
one) and hold at most ATTACHMENT_MAX_BYTES once decoded; a message carries at most
ATTACHMENTS_MAX_COUNT. An attachment that passes is stored with its message, so a reloaded page
shows it again.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from ag_ui.core import DataSource, TextPart, UrlSource, UserMessage
from django.conf import settings

from threads.models import Attachment
from threads.services.attachments import uploaded_id


@dataclass(slots=True, frozen=True)
class AttachmentRefused:
    """Why the message's attachments are refused, as the HTTP error to send."""

    status: int
    code: str
    message: str
    field: str


def uploads_named(message: UserMessage) -> dict[str, uuid.UUID]:
    """The uploaded files the message's parts name, by their URLs."""
    if isinstance(message.content, str):
        return {}
    urls = [p.source.value for p in message.content if not isinstance(p, TextPart) and isinstance(p.source, UrlSource)]
    return {url: attachment_id for url in urls if (attachment_id := uploaded_id(url)) is not None}


def uploads_refusal(message: UserMessage, found: Mapping[uuid.UUID, Attachment]) -> AttachmentRefused | None:
    """None when every uploaded file the message names is its sender's (``found``) and fits its part."""
    if isinstance(message.content, str):
        return None
    for part in message.content:
        if isinstance(part, TextPart) or not isinstance(part.source, UrlSource):
            continue
        url = part.source.value
        if (attachment_id := uploaded_id(url)) is None:
            continue
        attachment = found.get(attachment_id)
        if attachment is None:
            return AttachmentRefused(400, "unknown_attachment", f"no uploaded file of yours at {url}", "content")
        if (part.type == "image") != attachment.media_type.startswith("image/"):
            return AttachmentRefused(
                415, "unsupported_attachment", f"{url} is {attachment.media_type}, not an {part.type}", "content"
            )
    return None


def upload_refusal(media_type: str, size: int) -> AttachmentRefused | None:
    """None when a file of this type and size may be uploaded, else why not."""
    if media_type not in settings.ATTACHMENT_TYPES:
        taken = ", ".join(sorted(settings.ATTACHMENT_TYPES))
        return AttachmentRefused(
            415, "unsupported_attachment", f"a file of type {media_type!r} is not taken ({taken})", "Content-Type"
        )
    if size == 0:
        return AttachmentRefused(400, "invalid_attachment", "the file is empty: send its bytes as the body", "body")
    if size > settings.ATTACHMENT_MAX_BYTES:
        return AttachmentRefused(
            413,
            "attachment_too_large",
            f"the file is {size} bytes; the limit is {settings.ATTACHMENT_MAX_BYTES}",
            "body",
        )
    return None


def attachments_refusal(message: UserMessage) -> AttachmentRefused | None:
    """None when the message's attachments may be stored and sent to the model, else why not."""
    if isinstance(message.content, str):
        return None
    attached = [(index, part) for index, part in enumerate(message.content) if not isinstance(part, TextPart)]
    if len(attached) > settings.ATTACHMENTS_MAX_COUNT:
        return AttachmentRefused(
            413,
            "too_many_attachments",
            f"the message has {len(attached)} attachments; at most {settings.ATTACHMENTS_MAX_COUNT} are taken",
            "content",
        )
    for index, part in attached:
        field = f"content[{index}]"
        source = part.source
        if isinstance(source, UrlSource):
            # An uploaded file was checked when it was uploaded, and is checked against its owner
            # (uploads_refusal); any other address when it is fetched (agui/attachment_urls.py).
            continue
        if not isinstance(source, DataSource):
            return AttachmentRefused(
                415,
                "attachment_source_refused",
                f"a {part.type} attachment must carry its data (source type 'data') or a 'url'; a {source.type!r} "
                "source is not taken",
                field,
            )
        media_type = source.mime_type.lower()
        if media_type not in settings.ATTACHMENT_TYPES or (part.type == "image") != media_type.startswith("image/"):
            taken = ", ".join(sorted(settings.ATTACHMENT_TYPES))
            return AttachmentRefused(
                415,
                "unsupported_attachment",
                f"a {part.type} attachment of type {media_type!r} is not taken (images and documents of: {taken})",
                field,
            )
        try:
            size = len(base64.b64decode(source.value, validate=True))
        except (binascii.Error, ValueError):
            return AttachmentRefused(
                400, "invalid_attachment", f"the {part.type} attachment's data is not base64", field
            )
        if size > settings.ATTACHMENT_MAX_BYTES:
            return AttachmentRefused(
                413,
                "attachment_too_large",
                f"the {part.type} attachment is {size} bytes; the limit is {settings.ATTACHMENT_MAX_BYTES}",
                field,
            )
    return None
