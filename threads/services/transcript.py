"""The thread's transcript (its AG-UI messages, in order): what runs, sessions and sub-agents append."""

from __future__ import annotations

import functools
import uuid
from typing import Any

from django.db import connection

from agents.events import AssistantMessage, ToolMessage
from threads import fastsql
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
    """Appends to the thread's transcript (the caller holds the lock that orders its writers).
    Built once, not by the ORM per call: it runs at every model call (threads/fastsql.py)."""
    if not bodies:
        return
    with connection.cursor() as cursor:
        cursor.execute(_last_position_sql(connection.vendor), [fastsql.db_value(Message, "thread", thread_id)])
        (last,) = cursor.fetchone()
    start = 0 if last is None else last + 1
    fastsql.insert(
        *(
            Message(thread_id=thread_id, position=start + i, message_id=body["id"], role=body["role"], body=body)
            for i, body in enumerate(bodies)
        )
    )


@functools.cache
def _last_position_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    meta = Message._meta
    position, thread = meta.get_field("position").column, meta.get_field("thread").column
    return f"SELECT MAX({quote(str(position))}) FROM {quote(meta.db_table)} WHERE {quote(str(thread))} = %s"


def transcript_body(message: AssistantMessage | ToolMessage) -> dict[str, Any]:
    """The AG-UI message the loop's message is in the transcript."""
    if isinstance(message, ToolMessage):
        # Keys in the order of the protocol's ToolMessage, so a replayed snapshot
        # is byte for byte what the official models encode.
        tool: dict[str, Any] = {
            "id": message.message_id,
            "role": "tool",
            "content": message.content,
            "toolCallId": message.tool_call_id,
        }
        if message.error:
            tool["error"] = message.error
        return tool
    body: dict[str, Any] = {"id": message.message_id, "role": "assistant"}
    if message.content:
        body["content"] = message.content
    if message.tool_calls:
        body["toolCalls"] = [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in message.tool_calls
        ]
    return body
