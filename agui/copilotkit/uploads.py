"""Files uploaded for a message: what CopilotKit's ``useAttachments`` ``onUpload`` may send them to,
and where a page reads them back (agui/attachments.py says how a message names one)."""

from __future__ import annotations

import uuid

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from agui.attachments import upload_refusal
from agui.body import request_body
from agui.http import Caller, agui_endpoint, error_response
from threads import selectors
from threads.dbthread import on_db_thread
from threads.services.attachments import attachment_path, attachment_store


@agui_endpoint("POST", "POST a file's bytes to this URL, with its type as Content-Type")
async def attachment_upload(request: HttpRequest, caller: Caller) -> HttpResponseBase:
    """POST /copilotkit/attachments, the file as the body and its media type as Content-Type: the
    file is kept for its sender, ``201 {"type": "url", "value": <its address>, "mimeType",
    "metadata": {"id", "size"}}``, the source ``onUpload`` returns for a message part. A type not in
    ATTACHMENT_TYPES is 415, a file over ATTACHMENT_MAX_BYTES 413, and nothing is kept."""
    body = request_body(request)
    if isinstance(body, HttpResponseBase):
        return body
    media_type = (request.content_type or "").lower()
    if refused := upload_refusal(media_type, len(body)):
        return error_response(refused.status, refused.code, refused.message, refused.field)
    attachment = await on_db_thread(attachment_store, owner_id=caller.user_id, media_type=media_type, data=body)
    url = request.build_absolute_uri(attachment_path(attachment.pk))
    metadata = {"id": attachment.pk.hex, "size": attachment.size}
    return JsonResponse({"type": "url", "value": url, "mimeType": media_type, "metadata": metadata}, status=201)


@agui_endpoint("GET", "GET this URL for the uploaded file")
async def attachment_download(request: HttpRequest, caller: Caller, attachment_id: str) -> HttpResponseBase:
    """GET /copilotkit/attachments/<id>: the file, to its owner only (anyone else: 404)."""
    try:
        pk = uuid.UUID(hex=attachment_id)
    except ValueError:
        return error_response(404, "unknown_attachment", "no such attachment")
    found = await on_db_thread(selectors.attachments_of, ids=[pk], owner_id=caller.user_id)
    if pk not in found:
        return error_response(404, "unknown_attachment", "no such attachment")
    attachment = found[pk]
    response = HttpResponse(bytes(attachment.data), content_type=attachment.media_type)
    # A file a user sent is never run as a page of this origin.
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Disposition"] = "attachment" if not attachment.media_type.startswith("image/") else "inline"
    response["Cache-Control"] = "private, max-age=3600"
    return response
