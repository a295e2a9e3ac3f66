"""The attachments of a user message (AG-UI 1.0 image and document parts; CopilotKit's
useAttachments sends them inline, base64), checked before anything of the request is stored.

Each must carry its data (a ``url`` or ``file`` source is refused: Threadline fetches no address a
client names for the model), be of a type the model reads (ATTACHMENT_TYPES; an image part an
image, a document part not one), and hold at most ATTACHMENT_MAX_BYTES once decoded; a message
carries at most ATTACHMENTS_MAX_COUNT. An attachment that passes is stored with its message, so a
reloaded page shows it again.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from ag_ui.core import DataSource, TextPart, UserMessage
from django.conf import settings


@dataclass(slots=True, frozen=True)
class AttachmentRefused:
    """Why the message's attachments are refused, as the HTTP error to send."""

    status: int
    code: str
    message: str
    field: str


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
        if not isinstance(source, DataSource):
            return AttachmentRefused(
                415,
                "attachment_source_refused",
                f"a {part.type} attachment must carry its data (source type 'data'); a {source.type!r} source is "
                "not fetched: send the file's base64 data",
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
