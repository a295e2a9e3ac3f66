"""One model call's stream as run events, and the transcript messages it makes.

A provider streams blocks (text, thinking, tool_use); this turns them into the
run events listeners hear, tracks what is open, and splits the reply into the
assistant messages a client's transcript holds: a text block after tool calls
starts a new message, and tool calls attach to the message they followed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.events import (
    AssistantMessage,
    ReasoningDelta,
    ReasoningEnded,
    ReasoningStarted,
    TextDelta,
    TextEnded,
    TextStarted,
    ToolCallArgs,
    ToolCallEnded,
    ToolCallStarted,
)
from orchestrator.providers.base import JOIN_PIECES_PAST, BlockDelta, BlockStart, BlockStop, ModelReply


@dataclass(slots=True)
class _Segment:
    """One assistant message of the transcript: text and the tool calls made after it."""

    message_id: str
    text: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    has_text: bool = False


class CallStream:
    """Turns one model call's stream into run events, tracking what is open."""

    def __init__(self, emit: Callable[[Any], None], make_id: Callable[[str], str]) -> None:
        self.emit = emit
        self.make_id = make_id
        self.segments: list[_Segment] = [_Segment(make_id("msg"))]
        self.kinds: dict[int, str] = {}
        self.tool_ids: dict[int, str] = {}
        self.reasoning_id: str | None = None
        self.tool_segments: dict[str, _Segment] = {}
        self.emitted = False

    @property
    def segment(self) -> _Segment:
        return self.segments[-1]

    def handle(self, item: BlockStart | BlockDelta | BlockStop) -> None:
        emit = self.emit
        if type(item) is BlockDelta:
            kind = self.kinds[item.index]
            text = item.text
            if not text:
                return
            if kind == "text":
                segment = self.segments[-1]
                pieces = segment.text
                pieces.append(text)
                if len(pieces) > JOIN_PIECES_PAST:
                    pieces[:] = ["".join(pieces)]
                emit(TextDelta(segment.message_id, text))
            elif kind == "thinking":
                assert self.reasoning_id is not None
                emit(ReasoningDelta(self.reasoning_id, text))
            elif kind == "tool_use":
                emit(ToolCallArgs(self.tool_ids[item.index], text))
            return
        self.emitted = True
        if type(item) is BlockStart:
            self.kinds[item.index] = item.kind
            if item.kind == "thinking":
                self.reasoning_id = self.make_id("reasoning")
                emit(ReasoningStarted(self.reasoning_id))
            elif item.kind == "text":
                if self.segment.has_text or self.segment.tool_calls:
                    self.segments.append(_Segment(self.make_id("msg")))
                self.segment.has_text = True
                emit(TextStarted(self.segment.message_id))
            elif item.kind == "tool_use":
                self.tool_ids[item.index] = item.tool_use_id
                self.tool_segments[item.tool_use_id] = self.segment
                emit(ToolCallStarted(item.tool_use_id, item.tool_name, self.segment.message_id))
        else:
            stopped = self.kinds.get(item.index)
            if stopped == "thinking" and self.reasoning_id:
                emit(ReasoningEnded(self.reasoning_id))
                self.reasoning_id = None
            elif stopped == "text":
                emit(TextEnded(self.segment.message_id))
            elif stopped == "tool_use":
                tool_id = self.tool_ids[item.index]
                emit(ToolCallEnded(tool_id))

    def finish(self, reply: ModelReply) -> list[AssistantMessage]:
        """Emits what the stream left out and returns the transcript messages of the reply."""
        for block in reply.content:
            if block.get("type") != "tool_use":
                continue
            arguments = json.dumps(block.get("input") or {})
            segment = self.tool_segments.get(block["id"])
            if segment is None:
                # The provider reported this call only in its final message: the
                # stream must still show START, ARGS and END before the result.
                segment = self.segment
                self.emitted = True
                self.emit(ToolCallStarted(block["id"], block["name"], segment.message_id))
                self.emit(ToolCallArgs(block["id"], arguments))
                self.emit(ToolCallEnded(block["id"]))
            segment.tool_calls.append((block["id"], block["name"], arguments))
        return [
            AssistantMessage(s.message_id, "".join(s.text), tuple(s.tool_calls))
            for s in self.segments
            if s.has_text or s.tool_calls
        ]
