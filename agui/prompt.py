"""What the model is asked: the trailing user message of a RunAgentInput, as a RunRequest.

The client sends its whole transcript every turn; the server keeps its own
history, so only the new user message is forwarded, with the request's
``context`` entries rendered in front of it. Images and documents are passed
on; a part the model cannot read is named in the text rather than dropped.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ag_ui.core import DataSource, DocumentPart, ImagePart, TextPart, UrlSource, UserMessage

from agents.runtime import chat_scenario
from agui.decode import DecodedInput
from orchestrator.request import Image, RunRequest


def context_block(decoded: DecodedInput) -> str:
    entries = decoded.model.context or []
    if not entries:
        return ""
    lines = [f"- {entry.description}: {entry.value}" for entry in entries]
    return "<context>\n" + "\n".join(lines) + "\n</context>\n\n"


def _user_id(decoded: DecodedInput) -> str:
    return "" if decoded.owner_id is None else str(decoded.owner_id)


def no_message_request(decoded: DecodedInput) -> RunRequest:
    """The request of a run that goes on (an answer) or only shows the thread (a hydrate)."""
    return RunRequest(
        request_id=decoded.model.run_id,
        text="",
        user_id=_user_id(decoded),
        scenario=chat_scenario(),
    )


def build_request(
    decoded: DecodedInput,
    message: dict[str, Any],
    request_id: str,
    uploaded: Mapping[str, tuple[str, bytes]] | None = None,
) -> RunRequest:
    """The user's message as the model will see it: context first, then text, images, documents.
    ``uploaded``: the files uploaded here that its parts name, by URL (media type and bytes): the
    model is sent their data, never their address."""
    uploaded = uploaded or {}
    user = next(m for m in decoded.model.messages if m.id == message["id"])
    assert isinstance(user, UserMessage)
    texts: list[str] = []
    images: list[Image] = []
    extra: list[dict[str, Any]] = []
    parts = [TextPart(text=user.content)] if isinstance(user.content, str) else user.content
    for part in parts:
        if isinstance(part, TextPart):
            texts.append(part.text)
            continue
        source = part.source
        if isinstance(source, UrlSource) and source.value in uploaded:
            media_type, data = uploaded[source.value]
            source = DataSource(type="data", value=base64.b64encode(data).decode(), mime_type=media_type)
        if isinstance(part, ImagePart) and isinstance(source, DataSource):
            images.append(Image(media_type=source.mime_type, data=source.value))
        elif isinstance(part, ImagePart) and isinstance(source, UrlSource):
            images.append(Image(media_type=source.mime_type or "", url=source.value))
        elif isinstance(part, DocumentPart) and isinstance(source, DataSource):
            extra.append(
                {"type": "document", "source": {"type": "base64", "media_type": source.mime_type, "data": source.value}}
            )
        elif isinstance(part, DocumentPart) and isinstance(source, UrlSource):
            extra.append({"type": "document", "source": {"type": "url", "url": source.value}})
        else:
            kind = source.mime_type or "unknown type"
            texts.append(f"[{part.type} attachment ({kind}) not readable by this model]")
    return RunRequest(
        request_id=request_id,
        text=context_block(decoded) + "\n".join(texts),
        images=images,
        extra_content=extra,
        user_id=_user_id(decoded),
        scenario=chat_scenario(),
    )
