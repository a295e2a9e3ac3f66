"""One agent run across several AG-UI runs.

An agent run that waits (for a person's answer, or a client's own tool) ends
the AG-UI run it is in, once that run is durable, and goes on in the next one:
the resume that answers it, or a run of its own when the answer comes from
elsewhere (the admin, the API, a deadline). Each AG-UI run is a Run row and a
RunStream of its own; the translator moves from one to the next.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from agents.approvals import Answer, ApprovalRequest
from agui.approvals import answer_of, interrupt_of
from agui.decode import DecodedInput
from agui.frontend import client_tool_results, set_frontend_tools
from agui.registry import LiveRun
from agui.relay import RunRelay, shared_layer
from agui.stream import RunStream
from agui.translate import run_started
from threads import selectors
from threads.dbthread import on_db_thread
from threads.eventlog import EventLogWriter
from threads.models import Run
from threads.services import OpenedThread, approval_answer, run_finish, run_segment_open

log = logging.getLogger(__name__)

# The roles a 0.0.59 client's MESSAGES_SNAPSHOT schema knows.
_V0_ROLES = ("user", "assistant", "tool", "system", "developer")


def new_log(run_pk: Any) -> EventLogWriter:
    layer = shared_layer()
    return EventLogWriter(
        run_pk,
        flush_seconds=settings.EVENT_LOG_FLUSH_SECONDS,
        batch=settings.EVENT_LOG_BATCH,
        after_write=RunRelay(layer, run_pk).send if layer is not None else None,
    )


async def suspend(live: LiveRun, decoded: DecodedInput, opened: OpenedThread, requests: list[ApprovalRequest]) -> None:
    """Ends the current AG-UI run on interrupts, once it is durable; the agent run waits on."""
    assert live.translator is not None
    v1 = live.translator.v1
    live.translator.suspend(_suspension_outcome(live, v1=v1), await transcript_for(opened.thread, v1=v1))
    live.translator.hold()
    live.suspended = True
    await record_segment(live, Run.Status.WAITING, "interrupt", "")


def _suspension_outcome(live: LiveRun, *, v1: bool) -> dict[str, Any]:
    """What ends an AG-UI run whose agent run waits: the interrupts for a person, if any; else
    (only the client's own tools pending) success, naming the calls for a 1.0 client (``v1``:
    the client this outcome goes to, which may not be the one that started the run)."""
    announced = live.waiting.announced()
    questions = [p.request for p in announced if not p.request.client_tool]
    if questions:
        return {"type": "interrupt", "interrupts": [interrupt_of(r) for r in questions]}
    if v1:
        return {"type": "success", "pendingToolCallIds": [p.request.tool_call_id for p in announced]}
    return {}


async def record_segment(live: LiveRun, status: str, outcome: str, error: str) -> None:
    """Writes the current AG-UI run's log and end, then lets its terminal event out."""
    assert live.translator is not None
    try:
        if live.stream.log is not None:
            await live.stream.log.close()
        await on_db_thread(
            run_finish,
            run_id=live.run_pk,
            status=status,
            outcome=outcome,
            error=error,
            event_count=live.stream.last_seq,
            state=live.translator.state.document,
        )
    except Exception:
        log.exception("could not record the end of run %s", live.agui_run_id)
    finally:
        live.stream.close()


async def _open_segment(live: LiveRun, *, agui_run_id: str, v1: bool, protocol_version: str) -> None:
    """The agent run goes on in a new AG-UI run: a new Run row, stream and log."""
    assert live.translator is not None
    run = await on_db_thread(
        run_segment_open, previous_run_id=live.run_pk, agui_run_id=agui_run_id, protocol_version=protocol_version
    )
    stream = RunStream(log=None)
    stream.attach_log(new_log(run.pk))
    live.stream, live.run_pk, live.agui_run_id, live.suspended = stream, run.pk, agui_run_id, False
    live.translator.continue_in(stream.publish, run_id=agui_run_id, v1=v1)


async def go_on(live: LiveRun, decoded: DecodedInput) -> None:
    """Answered without a resume (the admin, the API, the deadline): the agent run goes on in
    a run of its own, which a client can follow with the thread's events stream."""
    if live.suspended:
        inp = decoded.model
        await _open_segment(
            live,
            agui_run_id=f"{inp.run_id}-continued",
            v1=decoded.speaks_v1,
            protocol_version=inp.protocol_version or "",
        )


async def hydrate_waiting(live: LiveRun, decoded: DecodedInput) -> RunStream:
    """A reloaded page on a thread whose agent run waits for answers: the messages, the state
    and the open interrupts again, so the page can ask the person once more."""
    assert live.translator is not None
    inp = decoded.model
    thread = await on_db_thread(selectors.thread_get, agui_thread_id=inp.thread_id)
    transcript = await transcript_for(thread, v1=decoded.speaks_v1)
    stream = RunStream(log=None)
    stream.publish(run_started(inp.thread_id, inp.run_id, v1=decoded.speaks_v1))
    stream.publish({"type": "MESSAGES_SNAPSHOT", "messages": transcript})
    stream.publish({"type": "STATE_SNAPSHOT", "snapshot": live.translator.state.document})
    finished: dict[str, Any] = {"type": "RUN_FINISHED", "threadId": inp.thread_id, "runId": inp.run_id}
    if outcome := _suspension_outcome(live, v1=decoded.speaks_v1):
        finished["outcome"] = outcome
    stream.publish(finished)
    stream.close()
    return stream


async def resume(live: LiveRun, decoded: DecodedInput, answered_by: str) -> RunStream:
    """Answers the interrupts a waiting agent run ended its last AG-UI run on, and returns the
    stream of the AG-UI run it goes on in. Every open interrupt must be answered."""
    inp = decoded.model
    entries = {entry.interrupt_id: entry for entry in inp.resume or []}
    results = client_tool_results(decoded)
    announced = live.waiting.announced()
    open_ids = [p.request.id for p in announced if not p.request.client_tool]
    missing = [interrupt_id for interrupt_id in open_ids if interrupt_id not in entries]
    missing += [p.request.id for p in announced if p.request.client_tool and p.request.id not in results]
    if missing or not live.suspended:
        stream = RunStream(log=None)
        stream.publish(run_started(inp.thread_id, inp.run_id, v1=decoded.speaks_v1))
        message = (
            f"answer every open interrupt in resume, and send the result of every pending tool call "
            f"as a tool message; not answered: {', '.join(missing)}"
            if missing
            else "nothing on this thread is waiting for an answer"
        )
        stream.publish({"type": "RUN_ERROR", "message": message, "code": "interrupt_unanswered"})
        stream.close()
        return stream
    await _open_segment(live, agui_run_id=inp.run_id, v1=decoded.speaks_v1, protocol_version=inp.protocol_version or "")
    assert live.registry_tools is not None
    set_frontend_tools(live.registry_tools, decoded)  # the client's tool set may have changed
    for pending in [p for p in announced if p.request.client_tool]:
        message_id, content = results[pending.request.id]
        if not pending.answer.done():
            pending.answer.set_result(Answer(approved=True, text=content, message_id=message_id))
    for interrupt_id in open_ids:
        pending = live.waiting.pending[interrupt_id]
        answer, decision = answer_of(entries[interrupt_id], answered_by, question=pending.request.question)
        # A duplicate answer (CopilotKit also adds a tool message) changes nothing.
        if (
            await on_db_thread(
                approval_answer,
                interrupt_id=interrupt_id,
                decision=decision,
                reason=answer.reason,
                always=answer.always,
                answered_by=answered_by,
            )
            and not pending.answer.done()
        ):
            pending.answer.set_result(answer)
    return live.stream


async def transcript_for(thread: Any, *, v1: bool) -> list[dict[str, Any]]:
    """The thread's messages for MESSAGES_SNAPSHOT, as the client's protocol version takes them."""
    transcript = await on_db_thread(selectors.thread_transcript, thread=thread)
    if v1:
        return transcript
    # A 0.x client knows neither sub-agents nor their messages.
    return [m for m in transcript if m.get("role") in _V0_ROLES and "subagentRunId" not in m]
