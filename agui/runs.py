"""Runs detached from the request that started them.

A run is an asyncio task owned by this process and registered by thread
(agui/registry.py); the SSE response that started it is only a subscriber of
its RunStream, so a client that goes away does not stop it, and a reattach can
follow it. How a run that waits goes on across several AG-UI runs is in
agui/segments.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

from agents.events import Listeners, Outcome
from agents.loop import AgentLoop
from agents.metrics import MetricsListener
from agents.permissions import Verdict, arules_for, evaluate, memory_key
from agents.providers.base import ModelProvider
from agents.request import RunRequest
from agents.runtime import loop_config, provider_for, subagent_limits, tool_context, tools_for
from agents.tools.base import Tool
from agui.approvals import InterruptApprover
from agui.decode import DecodedInput
from agui.frontend import set_frontend_tools
from agui.prompt import build_request
from agui.registry import REGISTRY, LiveRun
from agui.segments import go_on, new_log, record_segment, suspend, transcript_for
from agui.state import STATE_CACHE, ThreadState
from agui.stream import RunStream
from agui.translate import AguiTranslator, run_finished, run_started
from threads.dbthread import on_db_thread
from threads.models import Run
from threads.services import (
    AgentUnavailable,
    OpenedThread,
    ThreadConflict,
    run_open,
    session_approved_always,
    session_remember_approval,
)
from threads.store import DbSessionStore, DbSubAgentStore

log = logging.getLogger(__name__)


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
            owner_id=decoded.owner_id,
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
    live.stream.attach_log(new_log(live.run_pk))
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
        suspend=lambda requests: suspend(live, decoded, opened, requests),
        go_on=lambda: go_on(live, decoded),
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
        subagent_stores=lambda started, params: DbSubAgentStore(
            thread_pk=opened.thread.pk,
            session_id=opened.session.pk,
            run_pk=lambda: live.run_pk,
            started=started,
            params=params,
        ),
        subagent_limits=subagent_limits(),
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
            ask_a_person=settings.HUMAN_IN_THE_LOOP,
        )

    return policy


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
    transcript = await transcript_for(opened.thread, v1=decoded.speaks_v1)
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
            await record_segment(live, _STATUS[outcome], outcome.value, translator.error_message)
        finally:
            REGISTRY.forget(live)
