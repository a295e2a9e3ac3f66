"""Files users upload for their messages (CopilotKit's useAttachments ``onUpload``). A message names
one by its address; the first message that names it ties it to its thread, and it goes with that
thread (threads/services/workspaces.py ``thread_delete``). One that no message names within
ATTACHMENT_UNUSED_SECONDS is deleted by the sweep (runhost/sweep.py)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from threads.models import Attachment, Thread


def attachment_path(attachment_id: uuid.UUID) -> str:
    """The path of an uploaded file, its address in a message."""
    return f"{settings.COPILOTKIT_PATH}/attachments/{attachment_id.hex}"


def uploaded_id(url: str) -> uuid.UUID | None:
    """The id of the uploaded file a ``url`` source names (its path is an attachment's, whatever the
    host: the page may reach this server under another name), or None for any other address."""
    path = urlsplit(url).path
    found = re.fullmatch(re.escape(settings.COPILOTKIT_PATH) + r"/attachments/([0-9a-f]{32})", path)
    return uuid.UUID(hex=found.group(1)) if found else None


def attachments_named(transcript: list[dict[str, Any]]) -> set[uuid.UUID]:
    """The uploaded files a stored transcript's messages name (they go with its thread)."""
    named = set()
    for message in transcript:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            source = part.get("source") if isinstance(part, dict) else None
            value = source.get("value") if isinstance(source, dict) and source.get("type") == "url" else None
            if isinstance(value, str) and (attachment_id := uploaded_id(value)) is not None:
                named.add(attachment_id)
    return named


def attachment_store(*, owner_id: int | None, media_type: str, data: bytes) -> Attachment:
    """Keeps an uploaded file for its owner (None: the shared token's); the caller has checked its
    type and size (agui/attachments.py)."""
    attachment = Attachment(owner_id=owner_id, media_type=media_type, size=len(data), data=data)
    attachment.full_clean(exclude=["owner", "thread"])
    attachment.save(force_insert=True)
    return attachment


def attachments_claim(*, thread: Thread, message: dict[str, Any]) -> None:
    """Ties the uploads ``message`` names to ``thread``, in the transaction that stores the message, so
    the sweep never takes a file a stored message names. Only the thread owner's own uploads, and
    only those no thread has yet."""
    if named := attachments_named([message]):
        Attachment.objects.filter(pk__in=named, owner_id=thread.owner_id, thread=None).update(thread=thread)


def attachments_prune() -> int:
    """Deletes the uploads no message has named within ATTACHMENT_UNUSED_SECONDS; how many."""
    older = timezone.now() - timedelta(seconds=settings.ATTACHMENT_UNUSED_SECONDS)
    deleted, _ = Attachment.objects.filter(thread=None, created_at__lt=older).delete()
    return deleted
