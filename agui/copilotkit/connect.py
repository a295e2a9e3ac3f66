"""A page opening a thread (CopilotKit's ``connect``): the thread as it stands, then its live run.

CopilotKit's runners answer ``connect`` with the thread's history and, while a run goes on, that
run's events as they come (``InMemoryAgentRunner``; ``@copilotkit/core`` reads the stream without
AG-UI's one-run verifier, ``ɵconnectWithoutEventVerification``). Here the history is the hydrate
(agui/runs.py ``hydrate``: MESSAGES_SNAPSHOT, STATE_SNAPSHOT, and a pending approval or question
as the interrupt outcome), and a run still going is followed from its start, as a reattach follows
it, less what the snapshot showed already: a message, tool call or result is not drawn twice.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import orjson
from django.conf import settings

from agui.relay import follow_stored_run
from agui.runs import AguiRun
from runhost.host import HOST
from threads import selectors
from threads.dbthread import on_db_thread
from threads.models import Run
from vocabulary import agui as ev

_MESSAGE_EVENTS = frozenset(
    {ev.TEXT_MESSAGE_START, ev.TEXT_MESSAGE_CONTENT, ev.TEXT_MESSAGE_END, ev.TEXT_MESSAGE_CHUNK}
)
_TOOL_EVENTS = frozenset({ev.TOOL_CALL_START, ev.TOOL_CALL_ARGS, ev.TOOL_CALL_END, ev.TOOL_CALL_CHUNK})
_REASONING_EVENTS = frozenset(
    {
        ev.REASONING_START,
        ev.REASONING_MESSAGE_START,
        ev.REASONING_MESSAGE_CONTENT,
        ev.REASONING_MESSAGE_END,
        ev.REASONING_MESSAGE_CHUNK,
        ev.REASONING_END,
    }
)


def _frames(chunk: bytes) -> list[tuple[bytes, dict[str, Any] | None]]:
    """The chunk's SSE frames, each with its event (None for a heartbeat comment)."""
    frames: list[tuple[bytes, dict[str, Any] | None]] = []
    for block in chunk.split(b"\n\n"):
        if not block:
            continue
        _, found, data = block.partition(b"data: ")
        frames.append((block + b"\n\n", orjson.loads(data) if found else None))
    return frames


class _Shown:
    """The messages, tool calls and tool results the snapshot showed."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def snapshot(self, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            self.ids.add(message["id"])
            for call in message.get("toolCalls") or ():
                self.ids.add(call["id"])
            if message.get("role") == "tool":
                self.ids.add(f"result:{message.get('toolCallId')}")

    def has(self, event: dict[str, Any]) -> bool:
        kind = event["type"]
        if kind in _MESSAGE_EVENTS:
            return event.get("messageId") in self.ids
        if kind in _TOOL_EVENTS:
            return event.get("toolCallId") in self.ids
        if kind == ev.TOOL_CALL_RESULT:
            return f"result:{event.get('toolCallId')}" in self.ids
        return False


def _for_v0(event: dict[str, Any]) -> dict[str, Any]:
    """A followed run's RUN_FINISHED as a 0.x client takes it (the run may be a 1.0 client's):
    no outcome but an interrupt, no pendingToolCallIds."""
    outcome = event.get("outcome")
    finished = {key: value for key, value in event.items() if key not in ("outcome", "pendingToolCallIds")}
    if isinstance(outcome, dict) and outcome.get("type") == "interrupt":
        finished["outcome"] = outcome
    return finished


async def connect_stream(surface: AguiRun, *, thread_id: str, agent_name: str) -> AsyncGenerator[bytes, None]:
    """The hydrate's frames, then (when no question is open and a run is going on) the live run's."""
    heartbeat = settings.AGUI_HEARTBEAT_SECONDS
    shown = _Shown()
    settled = False  # the thread waits for an answer, or the replay failed: nothing runs on it
    async for chunk in surface.stream.subscribe(0, heartbeat):
        for _frame, event in _frames(chunk):
            if event is None:
                continue
            if event["type"] == ev.MESSAGES_SNAPSHOT:
                shown.snapshot(event["messages"])
            elif event["type"] == ev.RUN_ERROR or (
                event["type"] == ev.RUN_FINISHED and (event.get("outcome") or {}).get("type") == "interrupt"
            ):
                settled = True
        yield chunk
    if settled:
        return
    live = await _live_run(thread_id, agent_name)
    if live is not None:
        async for chunk in _unshown(live, shown, v1=surface.v1):
            yield chunk


async def _live_run(thread_id: str, agent_name: str) -> AsyncIterator[bytes] | None:
    """The frames of the thread's run still going, from its start, or None when none is."""
    open_run = await on_db_thread(selectors.thread_open_run, agui_thread_id=thread_id)
    if open_run is None or open_run.status != Run.Status.RUNNING:
        return None
    stream = HOST.registry.stream_of(open_run.pk)
    if stream is not None:
        return stream.subscribe(0, settings.AGUI_HEARTBEAT_SECONDS)
    if not open_run.held:
        return None  # its process is gone: the next message heals the thread
    run = await on_db_thread(selectors.run_by_pk, run_pk=open_run.pk)
    if run is None or run.thread.agent.name != agent_name:
        return None
    return follow_stored_run(run, 0)


async def _unshown(frames: AsyncIterator[bytes], shown: _Shown, *, v1: bool) -> AsyncGenerator[bytes, None]:
    """The run's frames less what the snapshot showed. Its reasoning is held until the run shows
    something the snapshot did not (the run is live there: the reasoning goes before it), and
    dropped if the run ends first (it led to an answer the snapshot already shows)."""
    live = False
    held: list[bytes] = []
    async for chunk in frames:
        out: list[bytes] = []
        for frame, event in _frames(chunk):
            if event is None:
                out.append(frame)
                continue
            kind = event["type"]
            if kind == ev.MESSAGES_SNAPSHOT or shown.has(event):
                continue
            if not v1 and ("subagentRunId" in event or kind in ev.SUBAGENT_TYPES):
                continue  # sub-agents' events, which a 0.x client refuses
            if not live and kind in _REASONING_EVENTS:
                held.append(frame)
                continue
            if not live and (kind in _MESSAGE_EVENTS or kind in _TOOL_EVENTS or kind == ev.TOOL_CALL_RESULT):
                live = True
                out.extend(held)
                held.clear()
            if kind in ev.TERMINAL_TYPES:
                held.clear()
                if not v1 and kind == ev.RUN_FINISHED:
                    frame = b"data: %s\n\n" % orjson.dumps(_for_v0(event))
            out.append(frame)
        if out:
            yield b"".join(out)
