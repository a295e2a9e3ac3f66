"""One run executed in this process: its loop built for the agent, the thread and the workspace, run
with the surface's listener, and how it ended told back to the host, which records it
(runhost/recording.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from agents.metrics import MetricsListener, record_answers
from agents.models import Agent
from agents.runtime import provider_for, run_tools
from orchestrator.events import BaseListener, Listeners, Outcome, RunListener
from orchestrator.request import RunRequest
from orchestrator.takeover import Takeover
from orchestrator.waits import Checkpoint, Resumption, Waiting
from runhost.assemble import assemble_loop
from runhost.budgets import SpendMeter
from runhost.registry import LiveRun
from runhost.surface import RunContext, RunSurface
from runhost.tallies import RunTallies
from threads.models import Session, Thread
from threads.services.workspaces import workspace_open
from threads.store import DbSessionStore

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class Execution:
    """What a run goes on with: its thread, session and agent, the AG-UI run it answers, the request,
    and where it starts from (a fresh message, the answers to a wait, or a dead process's last step)."""

    thread: Thread
    session: Session
    agent: Agent
    agui_run_id: str
    request: RunRequest
    resume: Resumption | None
    client_tools: list[dict[str, Any]]
    takeover: Takeover | None = None


@dataclass(slots=True)
class RunEnd:
    """How the run ended, filled in as it goes: what is recorded even when it ends by an error."""

    outcome: Outcome = Outcome.ERROR
    checkpoint: Checkpoint | None = None  # set when it waits
    listener: RunListener | None = field(default=None)

    @property
    def error(self) -> str:
        return getattr(self.listener, "error_message", "")


class _CancelWatch(BaseListener):
    def __init__(self, live: LiveRun) -> None:
        self.live = live

    def should_continue(self) -> bool:
        return not self.live.cancel_requested


async def execute(
    live: LiveRun,
    run: Execution,
    surface: RunSurface,
    end: RunEnd,
    meter: SpendMeter,
    tallies: RunTallies,
    hands_over: Callable[[], bool] | None = None,
) -> None:
    """Runs ``run`` to its end or its wait, streamed through ``surface``, its spend settled by
    ``meter`` and counted for the dashboard by ``tallies``; ``end`` says how it ended (an error, unless it
    got further). Cancelling the task ends it as cancelled. ``hands_over`` is asked at each step
    boundary: True stops the run there, handed over (its process drains: runhost/drain.py)."""
    thread, agent, resume = run.thread, run.agent, run.resume
    if resume is not None:
        record_answers(resume.checkpoint, resume.answers, approval_seconds=settings.APPROVAL_TIMEOUT_SECONDS)
    provider = provider_for(agent)
    announced = (
        frozenset(resume.checkpoint.done) | {c.call_id for c in resume.checkpoint.open} if resume else frozenset()
    )
    context = RunContext(
        agui_thread_id=thread.agui_thread_id,
        agui_run_id=run.agui_run_id,
        run_pk=live.run_pk,
        thread=thread,
        session=run.session,
        agent=agent,
        model=provider.info,
        announced_calls=frozenset(announced),
        takeovers=live.takeovers,
    )
    try:
        end.listener = surface.attach(context)
        live.stream = surface.stream
        # Made (from its template) only now, on a worker thread: RUN_STARTED never waits for it.
        workspace = await workspace_open(thread)
        live.listener = Listeners(end.listener, MetricsListener(agent.name), _CancelWatch(live), meter, tallies)
        loop = assemble_loop(
            tools=await run_tools(agent),
            agent=agent,
            thread=thread,
            session=run.session,
            run_pk=live.run_pk,
            provider=provider,
            workspace=workspace,
            client_tools=run.client_tools,
            listener=live.listener,
            cancelled=live.cancelled,
            spend=meter,
            takeovers=live.takeovers,
        )
        loop.hand_over = hands_over
        log.info(
            "run %s of thread %s: agent %s, scenario %s%s",
            run.agui_run_id,
            thread.agui_thread_id,
            agent.name,
            run.request.scenario.name,
            ", going on after a wait" if resume else ", taken over" if run.takeover else "",
        )
        ended = await loop.run(
            run.request,
            run_id=run.agui_run_id,
            thread_id=thread.agui_thread_id,
            resume=resume,
            takeover=run.takeover,
        )
        if isinstance(loop.store, DbSessionStore) and loop.store.taken_over:
            # At once, before the log's writer takes the end the loop just published.
            live.lose()
        match ended:
            case Waiting(checkpoint=waiting):
                end.outcome, end.checkpoint = Outcome.WAITING, waiting
                await surface.waiting(waiting)
            case Outcome() as finished:
                end.outcome = finished
    except asyncio.CancelledError:
        end.outcome = Outcome.CANCELLED
    except Exception:
        log.exception("run %s of thread %s failed", run.agui_run_id, thread.agui_thread_id)
        end.outcome = Outcome.ERROR
