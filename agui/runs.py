"""Runs detached from the request that started them.

A run is an asyncio task owned by this process and registered by thread
(agui/registry.py); the SSE response that started it is only a subscriber of
its RunStream, so a client that goes away does not stop it, and a reattach can
follow it.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from agents.approvals import Answer, ApprovalRequest
from agents.events import Listeners, Outcome
from agents.loop import AgentLoop
from agents.metrics import MetricsListener
from agents.permissions import Verdict, arules_for, evaluate, memory_key
from agents.providers.base import ModelProvider
from agents.request import RunRequest
from agents.runtime import loop_config, provider_for, tool_context, tools_for
from agents.tools.base import Tool
from agui.approvals import InterruptApprover, answer_of, interrupt_of
from agui.decode import DecodedInput
from agui.frontend import client_tool_results, set_frontend_tools
from agui.prompt import build_request
from agui.registry import REGISTRY, LiveRun
from agui.relay import RunRelay, shared_layer
from agui.state import STATE_CACHE, ThreadState
from agui.stream import RunStream
from agui.translate import AguiTranslator, run_finished, run_started
from threads import selectors
from threads.dbthread import on_db_thread
from threads.eventlog import EventLogWriter
from threads.models import Run
from threads.services import (
    AgentUnavailable,
    OpenedThread,
    ThreadConflict,
    approval_answer,
    run_finish,
    run_open,
    run_segment_open,
    session_approved_always,
    session_remember_approval,
)
from threads.store import DbSessionStore

log = logging.getLogger(__name__)

# The roles a 0.0.59 client's MESSAGES_SNAPSHOT schema knows.
_V0_ROLES = ("user", "assistant", "tool", "system", "developer")

_STATUS = {
    Outcome.SUCCESS: Run.Status.SUCCEEDED,
    Outcome.ERROR: Run.Status.FAILED,
    Outcome.CANCELLED: Run.Status.CANCELLED,
    Outcome.PAUSED: Run.Status.PAUSED,
    Outcome.INTERRUPTED: Run.Status.INTERRUPTED,
}


def launch(*, agent_name: str, decoded: DecodedInput, message: dict[str, Any] | None) -> LiveRun:
    """Answers a request: RUN_STARTED is on the stream when this returns.

    The thread is opened (and the run recorded) by the task that follows, so the
    first byte does not wait on the database; what the database refuses from
    then on (a runId already used, a thread of another agent) ends the stream
    with RUN_ERROR, which is also how CopilotKit shows a server's error. A
    request with a new user message makes the thread busy at once, so a second
    one is refused (409) before anything is sent.
    """
    inp = decoded.model
    stream = RunStream(log=None)
    live = LiveRun(run_pk=uuid.uuid4(), agui_run_id=inp.run_id, agui_thread_id=inp.thread_id, stream=stream)
    stream.publish(run_started(inp.thread_id, inp.run_id, v1=decoded.speaks_v1))
    if message is not None:
        live.message_ids.add(message["id"])
        REGISTRY.register(live)
    # A fresh context: the run outlives the request, so it must not inherit the
    # request's thread-sensitive executor (asgiref would keep a thread and a
    # database connection alive for it after the request ends).
    live.task = asyncio.get_running_loop().create_task(
        _open_and_run(live, agent_name, decoded, message), name=f"run-{inp.run_id}", context=contextvars.Context()
    )
    return live


async def _open_and_run(live: LiveRun, agent_name: str, decoded: DecodedInput, message: dict[str, Any] | None) -> None:
    inp = decoded.model
    try:
        opened = await on_db_thread(
            run_open,
            agent_name=agent_name,
            agui_thread_id=inp.thread_id,
            agui_run_id=inp.run_id,
            run_pk=live.run_pk,
            new_user_message=message,
            protocol_version=inp.protocol_version or "",
            live_run_ids=REGISTRY.live_run_pks() - {live.run_pk},
        )
    except AgentUnavailable as exc:
        _end_unopened(live, {"type": "RUN_ERROR", "message": str(exc), "code": "unknown_agent"})
        return
    except ThreadConflict as exc:
        _end_unopened(live, {"type": "RUN_ERROR", "message": str(exc), "code": "conflict"})
        return
    except Exception:
        log.exception("could not open run %s of thread %s", inp.run_id, inp.thread_id)
        _end_unopened(
            live, {"type": "RUN_ERROR", "message": "the server could not open the thread", "code": "internal"}
        )
        return
    live.message_ids |= opened.stored_message_ids
    if opened.run is None:
        await _hydrate(live, decoded, opened)
        return
    agent = opened.agent  # as the database has it now, not as a cache saw it
    provider = provider_for(agent)
    live.stream.attach_log(_new_log(live.run_pk))
    state = _thread_state(decoded, opened, provider)
    STATE_CACHE.put(inp.thread_id, state.document)
    translator = AguiTranslator(
        live.stream.publish,
        thread_id=inp.thread_id,
        run_id=inp.run_id,
        v1=decoded.speaks_v1,
        state=state,
        should_continue=lambda: not live.cancel_requested,
    )
    translator.start(announced=True)
    live.translator = translator
    registry = tools_for(agent)
    set_frontend_tools(registry, decoded)
    live.registry_tools = registry
    approver = InterruptApprover(
        run_pk=lambda: live.run_pk,
        waiting=live.waiting,
        policy=_policy(agent.name, inp.thread_id, opened.session.pk),
        remember=lambda tool, arguments: on_db_thread(
            session_remember_approval, session_id=opened.session.pk, key=memory_key(tool, arguments)
        ),
        suspend=lambda requests: _suspend(live, decoded, opened, requests),
        go_on=lambda: _go_on(live, decoded),
        timeout=settings.APPROVAL_TIMEOUT_SECONDS,
        client_tool_timeout=settings.FRONTEND_TOOL_TIMEOUT_SECONDS,
    )
    loop = AgentLoop(
        provider=provider,
        tools=registry,
        tool_context=tool_context(),
        config=loop_config(agent, provider, grounding=opened.session.grounding_override),
        store=DbSessionStore(session_id=opened.session.pk, run_pk=live.run_pk, turns=opened.session.turns),
        listener=Listeners(translator, MetricsListener()),
        approver=approver,
    )
    assert message is not None
    await _execute(live, loop, build_request(decoded, message, request_id=inp.run_id), translator)


def _policy(agent_name: str, thread_id: str, session_id: Any) -> Callable[[Tool, dict[str, Any]], Awaitable[Verdict]]:
    """The permission rules in scope, read at each call (an operator's edit applies at once),
    with the session's "yes, always" answers and AGENT_MUTATING_TOOLS=on as auto-approve."""

    async def policy(tool: Tool, arguments: dict[str, Any]) -> Verdict:
        rules = await arules_for(agent_name, thread_id)
        remembered = memory_key(tool.name, arguments) in await on_db_thread(
            session_approved_always, session_id=session_id
        )
        return evaluate(
            rules,
            tool=tool,
            arguments=arguments,
            remembered=remembered,
            auto_approve=settings.AGENT_MUTATING_TOOLS == "on",
        )

    return policy


def _new_log(run_pk: Any) -> EventLogWriter:
    layer = shared_layer()
    return EventLogWriter(
        run_pk,
        flush_seconds=settings.EVENT_LOG_FLUSH_SECONDS,
        batch=settings.EVENT_LOG_BATCH,
        after_write=RunRelay(layer, run_pk).send if layer is not None else None,
    )


async def _suspend(live: LiveRun, decoded: DecodedInput, opened: OpenedThread, requests: list[ApprovalRequest]) -> None:
    """Ends the current AG-UI run on interrupts, once it is durable; the agent run waits on."""
    assert live.translator is not None
    v1 = live.translator.v1
    live.translator.suspend(_suspension_outcome(live, v1=v1), await _transcript(opened.thread, v1=v1))
    live.translator.hold()
    live.suspended = True
    await _record_segment(live, Run.Status.WAITING, "interrupt", "")


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


async def _record_segment(live: LiveRun, status: str, outcome: str, error: str) -> None:
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
    stream.attach_log(_new_log(run.pk))
    live.stream, live.run_pk, live.agui_run_id, live.suspended = stream, run.pk, agui_run_id, False
    live.translator.continue_in(stream.publish, run_id=agui_run_id, v1=v1)


async def _go_on(live: LiveRun, decoded: DecodedInput) -> None:
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
    transcript = await _transcript(thread, v1=decoded.speaks_v1)
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


async def _transcript(thread: Any, *, v1: bool) -> list[dict[str, Any]]:
    """The thread's messages for MESSAGES_SNAPSHOT, as the client's protocol version takes them."""
    transcript = await on_db_thread(selectors.thread_transcript, thread=thread)
    return transcript if v1 else [m for m in transcript if m.get("role") in _V0_ROLES]


def _thread_state(decoded: DecodedInput, opened: OpenedThread, provider: ModelProvider) -> ThreadState:
    inp = decoded.model
    return ThreadState.for_run(
        STATE_CACHE.get(inp.thread_id, opened.thread.state),
        thread_id=inp.thread_id,
        title=opened.thread.title,
        session_id=str(opened.session.pk),
        agent=opened.agent.name,
        model=provider.info,
        client_state=inp.state,
    )


def _end_unopened(live: LiveRun, terminal: dict[str, Any]) -> None:
    """Ends a stream whose run was never recorded (refused, or a hydrate)."""
    live.stream.publish(terminal)
    live.stream.close()
    REGISTRY.forget(live)


async def _hydrate(live: LiveRun, decoded: DecodedInput, opened: OpenedThread) -> None:
    """Replays the thread's messages and state without running the agent."""
    inp = decoded.model
    transcript = await _transcript(opened.thread, v1=decoded.speaks_v1)
    state = _thread_state(decoded, opened, provider_for(opened.agent))
    live.stream.publish({"type": "MESSAGES_SNAPSHOT", "messages": transcript})
    live.stream.publish({"type": "STATE_SNAPSHOT", "snapshot": state.document})
    _end_unopened(live, run_finished(inp.thread_id, inp.run_id, v1=decoded.speaks_v1))


async def _execute(live: LiveRun, loop: AgentLoop, request: RunRequest, translator: AguiTranslator) -> None:
    outcome = Outcome.ERROR
    try:
        outcome = await loop.run(request, run_id=live.agui_run_id, thread_id=live.agui_thread_id)
    except asyncio.CancelledError:
        outcome = Outcome.CANCELLED
    finally:
        REGISTRY.release(live)
        try:
            # The terminal event reaches subscribers only once this is recorded (RunStream).
            await _record_segment(live, _STATUS[outcome], outcome.value, translator.error_message)
        finally:
            REGISTRY.forget(live)
