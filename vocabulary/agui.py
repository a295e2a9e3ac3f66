"""The AG-UI event vocabulary: every event type's name, one constructor per event type, and the
tracker of what a stream left open.

This is the one module that spells the protocol's event type names. Events are plain dicts with
camelCase keys in the ag-ui-protocol models' field order, optional keys omitted, so encoding one
gives the frame the models would (the hot path encodes with orjson, agui/stream.py). It imports
no Django and nothing of the project: agui/ builds its streams with it, and threads/ closes the
log of a run whose process died with it (threads/healing.py) without reaching agui/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Event = dict[str, Any]

RUN_STARTED = "RUN_STARTED"
RUN_FINISHED = "RUN_FINISHED"
RUN_ERROR = "RUN_ERROR"
STATE_SNAPSHOT = "STATE_SNAPSHOT"
STATE_DELTA = "STATE_DELTA"
MESSAGES_SNAPSHOT = "MESSAGES_SNAPSHOT"
TEXT_MESSAGE_START = "TEXT_MESSAGE_START"
TEXT_MESSAGE_CONTENT = "TEXT_MESSAGE_CONTENT"
TEXT_MESSAGE_END = "TEXT_MESSAGE_END"
TOOL_CALL_START = "TOOL_CALL_START"
TOOL_CALL_ARGS = "TOOL_CALL_ARGS"
TOOL_CALL_END = "TOOL_CALL_END"
TOOL_CALL_RESULT = "TOOL_CALL_RESULT"
REASONING_START = "REASONING_START"
REASONING_MESSAGE_START = "REASONING_MESSAGE_START"
REASONING_MESSAGE_CONTENT = "REASONING_MESSAGE_CONTENT"
REASONING_MESSAGE_END = "REASONING_MESSAGE_END"
REASONING_END = "REASONING_END"
STEP_STARTED = "STEP_STARTED"
STEP_FINISHED = "STEP_FINISHED"
CUSTOM = "CUSTOM"
SUBAGENT_STARTED = "SUBAGENT_STARTED"
SUBAGENT_FINISHED = "SUBAGENT_FINISHED"
SUBAGENT_ERROR = "SUBAGENT_ERROR"
# The protocol's chunk events: this server sends none, but a stored log may be read with them.
TEXT_MESSAGE_CHUNK = "TEXT_MESSAGE_CHUNK"
REASONING_MESSAGE_CHUNK = "REASONING_MESSAGE_CHUNK"
TOOL_CALL_CHUNK = "TOOL_CALL_CHUNK"

# The events that end a run: nothing but a new RUN_STARTED may follow one.
TERMINAL_TYPES = frozenset({RUN_FINISHED, RUN_ERROR})
# The events only a 1.0 client knows.
SUBAGENT_TYPES = frozenset({SUBAGENT_STARTED, SUBAGENT_FINISHED, SUBAGENT_ERROR})

# CUSTOM events of a message sent while the run was in flight: it was queued, and (a tool boundary
# later) the run read it. ``requestId``/``requestIds`` are the runIds of the requests that sent them.
MESSAGE_QUEUED = "threadline.message_queued"
QUEUED_MESSAGES_READ = "threadline.queued_messages_read"
# How far a tool call in flight is (an MCP server's progress notification), between its
# TOOL_CALL_END and its TOOL_CALL_RESULT.
TOOL_PROGRESS = "threadline.tool_progress"


# -- the run ---------------------------------------------------------------


def run_started(thread_id: str, run_id: str, *, v1: bool = False) -> Event:
    event: Event = {"type": RUN_STARTED, "threadId": thread_id, "runId": run_id}
    if v1:
        event["protocolVersion"] = "1.0"
    return event


def run_finished(thread_id: str, run_id: str, outcome: dict[str, Any] | None = None) -> Event:
    event: Event = {"type": RUN_FINISHED, "threadId": thread_id, "runId": run_id}
    if outcome:
        event["outcome"] = outcome
    return event


def run_error(message: str, code: str) -> Event:
    return {"type": RUN_ERROR, "message": message, "code": code}


def state_snapshot(document: Any) -> Event:
    return {"type": STATE_SNAPSHOT, "snapshot": document}


def state_delta(ops: list[dict[str, Any]]) -> Event:
    return {"type": STATE_DELTA, "delta": ops}


def messages_snapshot(messages: list[dict[str, Any]]) -> Event:
    return {"type": MESSAGES_SNAPSHOT, "messages": messages}


def step_started(name: str) -> Event:
    return {"type": STEP_STARTED, "stepName": name}


def step_finished(name: str) -> Event:
    return {"type": STEP_FINISHED, "stepName": name}


def custom(name: str, value: Any) -> Event:
    return {"type": CUSTOM, "name": name, "value": value}


# -- messages, tool calls, reasoning ----------------------------------------


def text_message_start(message_id: str) -> Event:
    return {"type": TEXT_MESSAGE_START, "messageId": message_id, "role": "assistant"}


def text_message_content(message_id: str, delta: str) -> Event:
    return {"type": TEXT_MESSAGE_CONTENT, "messageId": message_id, "delta": delta}


def text_message_end(message_id: str) -> Event:
    return {"type": TEXT_MESSAGE_END, "messageId": message_id}


def tool_call_start(tool_call_id: str, name: str, parent_message_id: str) -> Event:
    return {
        "type": TOOL_CALL_START,
        "toolCallId": tool_call_id,
        "toolCallName": name,
        "parentMessageId": parent_message_id,
    }


def tool_call_args(tool_call_id: str, delta: str) -> Event:
    return {"type": TOOL_CALL_ARGS, "toolCallId": tool_call_id, "delta": delta}


def tool_call_end(tool_call_id: str) -> Event:
    return {"type": TOOL_CALL_END, "toolCallId": tool_call_id}


def tool_call_result(message_id: str, tool_call_id: str, content: str) -> Event:
    return {
        "type": TOOL_CALL_RESULT,
        "messageId": message_id,
        "toolCallId": tool_call_id,
        "content": content,
        "role": "tool",
    }


def reasoning_start(reasoning_id: str) -> Event:
    return {"type": REASONING_START, "messageId": reasoning_id}


def reasoning_message_start(reasoning_id: str) -> Event:
    return {"type": REASONING_MESSAGE_START, "messageId": reasoning_id, "role": "reasoning"}


def reasoning_message_content(reasoning_id: str, delta: str) -> Event:
    return {"type": REASONING_MESSAGE_CONTENT, "messageId": reasoning_id, "delta": delta}


def reasoning_message_end(reasoning_id: str) -> Event:
    return {"type": REASONING_MESSAGE_END, "messageId": reasoning_id}


def reasoning_end(reasoning_id: str) -> Event:
    return {"type": REASONING_END, "messageId": reasoning_id}


# -- sub-agents (1.0 clients only) -------------------------------------------


def subagent_started(
    subagent_run_id: str, name: str, description: str, parent_subagent_run_id: str, parent_tool_call_id: str
) -> Event:
    event: Event = {
        "type": SUBAGENT_STARTED,
        "subagentRunId": subagent_run_id,
        "name": name,
        "description": description,
    }
    if parent_subagent_run_id:
        event["parentSubagentRunId"] = parent_subagent_run_id
    event["parentToolCallId"] = parent_tool_call_id
    return event


def subagent_finished(subagent_run_id: str, outcome: dict[str, Any], result: str | None = None) -> Event:
    event: Event = {"type": SUBAGENT_FINISHED, "subagentRunId": subagent_run_id}
    if result is not None:
        event["result"] = result
    event["outcome"] = outcome
    return event


def subagent_error(subagent_run_id: str, message: str, code: str) -> Event:
    return {"type": SUBAGENT_ERROR, "subagentRunId": subagent_run_id, "message": message, "code": code}


def in_subagent(event: Event, subagent_run_id: str) -> Event:
    """A child's event as its parent's stream carries it: tagged with the child's run id, right
    after ``type``, where the protocol's models put it."""
    kind, rest = event["type"], {k: v for k, v in event.items() if k != "type"}
    return {"type": kind, "subagentRunId": subagent_run_id, **rest}


# -- what is open -------------------------------------------------------------


@dataclass(slots=True)
class OpenParts:
    """What a stream has opened and not yet closed (text messages, tool calls, reasoning spans,
    steps), kept in the order opened, and the tool calls it closed (a toolCallId is never reused).
    ``see`` follows the stream's start and end events; ``close`` gives the END events of what is
    still open, innermost first, in the order the clients require before a terminal event."""

    texts: dict[str, None] = field(default_factory=dict)
    tools: dict[str, None] = field(default_factory=dict)
    closed_tools: set[str] = field(default_factory=set)
    reasoning: dict[str, None] = field(default_factory=dict)
    steps: dict[str, None] = field(default_factory=dict)

    def see(self, event: Event) -> Event:
        """Follows ``event`` (any event: those that open or close nothing change nothing) and returns it."""
        kind = event["type"]
        if kind == TEXT_MESSAGE_START:
            self.texts[event["messageId"]] = None
        elif kind == TEXT_MESSAGE_END:
            self.texts.pop(event["messageId"], None)
        elif kind == TOOL_CALL_START:
            self.tools[event["toolCallId"]] = None
        elif kind == TOOL_CALL_END:
            self.tools.pop(event["toolCallId"], None)
            self.closed_tools.add(event["toolCallId"])
        elif kind == REASONING_START:
            self.reasoning[event["messageId"]] = None
        elif kind == REASONING_END:
            self.reasoning.pop(event["messageId"], None)
        elif kind == STEP_STARTED:
            self.steps[event["stepName"]] = None
        elif kind == STEP_FINISHED:
            self.steps.pop(event["stepName"], None)
        return event

    def close(self) -> list[Event]:
        """The END events of everything still open, which is then closed."""
        closings = [text_message_end(m) for m in self.texts]
        closings += [tool_call_end(t) for t in self.tools]
        for reasoning_id in self.reasoning:
            closings += [reasoning_message_end(reasoning_id), reasoning_end(reasoning_id)]
        closings += [step_finished(s) for s in reversed(list(self.steps))]
        for event in closings:
            self.see(event)
        return closings


def close_log(events: list[Event]) -> tuple[list[Event], OpenParts]:
    """The events that close what a log of ``events`` left open, in the order the clients require
    (each sub-agent still at work closed inside and then ended with SUBAGENT_ERROR, innermost first;
    then the run's own parts), and the run's parts once closed (which tool calls it has closed). For
    the continuation of a run whose process died (threads/takeover.py)."""
    runs: dict[str, OpenParts] = {"": OpenParts()}  # by subagentRunId; "" is the run's own
    for event in events:
        kind = event["type"]
        child = str(event.get("subagentRunId", ""))
        if kind == SUBAGENT_STARTED:
            runs[child] = OpenParts()
        elif kind in (SUBAGENT_FINISHED, SUBAGENT_ERROR):
            runs.pop(child, None)
        elif child in runs:
            runs[child].see(event)
    closings: list[Event] = []
    for child, opened in reversed(list(runs.items())):
        if not child:
            continue
        closings += [in_subagent(event, child) for event in opened.close()]
        closings.append(subagent_error(child, "the server process running this sub-agent stopped", "interrupted"))
    own = runs[""]
    closings += own.close()
    return closings, own


# The events OpenParts follows: a reader of a stored log decodes only these.
OPENING_AND_CLOSING = frozenset(
    {
        TEXT_MESSAGE_START,
        TEXT_MESSAGE_END,
        TOOL_CALL_START,
        TOOL_CALL_END,
        REASONING_START,
        REASONING_END,
        STEP_STARTED,
        STEP_FINISHED,
    }
)
# And those close_log follows besides.
OPENING_AND_CLOSING_RUNS = OPENING_AND_CLOSING | SUBAGENT_TYPES
