"""The thread's transcript (its AG-UI messages, in order): what runs, sessions and sub-agents append."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Max

from agents.events import AssistantMessage, ToolMessage
from threads.models import Message


def message_preview(message: dict[str, Any]) -> str:
    """One line that names a message: its text, at most 80 characters. A thread's title, and
    what listeners are told of a queued message."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    text = " ".join(str(content or "").split())
    return text[:80] + ("…" if len(text) > 80 else "")


def messages_append(*, thread_id: uuid.UUID, bodies: list[dict[str, Any]]) -> None:
    if not bodies:
        return
    last = Message.objects.filter(thread_id=thread_id).aggregate(last=Max("position"))["last"]
    start = 0 if last is None else last + 1
    Message.objects.bulk_create(
        [
            Message(thread_id=thread_id, position=start + i, message_id=body["id"], role=body["role"], body=body)
            for i, body in enumerate(bodies)
        ]
    )


def transcript_body(message: AssistantMessage | ToolMessage) -> dict[str, Any]:
    """The AG-UI message the loop's message is in the transcript."""
    if isinstance(message, ToolMessage):
        # Keys in the order of the protocol's ToolMessage, so a replayed snapshot
        # is byte for byte what the official models encode.
        return {
            "id": message.message_id,
            "role": "tool",
            "content": message.content,
            "toolCallId": message.tool_call_id,
        }
    body: dict[str, Any] = {"id": message.message_id, "role": "assistant"}
    if message.content:
        body["content"] = message.content
    if message.tool_calls:
        body["toolCalls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in message.tool_calls
        ]
    return body
