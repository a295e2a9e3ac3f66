"""Files users upload for their messages (CopilotKit's useAttachments ``onUpload``). They go with
the thread whose messages name them (threads/services/workspaces.py ``thread_delete``)."""

from __future__ import annotations

from threads.models import Attachment


def attachment_store(*, owner_id: int | None, media_type: str, data: bytes) -> Attachment:
    """Keeps an uploaded file for its owner (None: the shared token's); the caller has checked its
    type and size (agui/attachments.py)."""
    attachment = Attachment(owner_id=owner_id, media_type=media_type, size=len(data), data=data)
    attachment.full_clean(exclude=["owner"])
    attachment.save(force_insert=True)
    return attachment
