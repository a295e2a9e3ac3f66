"""The thread's transcript (its AG-UI messages, in order): what runs, sessions and sub-agents append."""

from __future__ import annotations

import functools
import uuid
from typing import Any

from django.db import connection

from orchestrator.events import AssistantMessage, ToolMessage
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
    """Appends to the thread's transcript (the caller holds the lock that orders its writers)."""
    fastsql.execute(*append_statements(thread_id=thread_id, bodies=bodies))


def append_statements(*, thread_id: uuid.UUID, bodies: list[dict[str, Any]]) -> list[fastsql.Statement]:
    """``messages_append`` as statements, for a caller that runs them with its own (fastsql.execute).
    Each message takes the position after the last one stored when it goes in, so the statements
    need no read before them: it runs at every model call (threads/fastsql.py)."""
    names = fastsql.insertable(Message)
    position, thread = names.index("position"), names.index("thread")
    sql = _append_sql(connection.vendor)
    statements = []
    for body in bodies:
        message = Message(thread_id=thread_id, position=0, message_id=body["id"], role=body["role"], body=body)
        _, values = fastsql.insert_statement(message)
        values[position] = values[thread]  # the WHERE's thread, in position's place
        statements.append((sql, values))
    return statements


@functools.cache
def _append_sql(vendor: str) -> str:
    """INSERT ... SELECT of one message, its position computed from those stored; the thread's
    value is the parameter in position's place."""
    quote = connection.ops.quote_name
    meta = Message._meta
    names = fastsql.insertable(Message)
    columns = [quote(str(meta.get_field(name).column)) for name in names]  # type: ignore[union-attr]
    position, thread = columns[names.index("position")], quote(str(meta.get_field("thread").column))
    selected = ["%s"] * len(names)
    selected[names.index("position")] = (
        f"(SELECT COALESCE(MAX({position}), -1) + 1 FROM {quote(meta.db_table)} WHERE {thread} = %s)"
    )
    return f"INSERT INTO {quote(meta.db_table)} ({', '.join(columns)}) VALUES ({', '.join(selected)})"


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
