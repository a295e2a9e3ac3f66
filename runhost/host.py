"""The run host: starts runs, goes on with waiting ones, cancels, sweeps deadlines, shuts down.

One AG-UI request reads straight down: the view decodes it and asks the host
(``start`` or ``answer``); the host opens or claims the run in the database,
builds the loop, runs it with the surface's listener, and records the end; the
surface (agui/) translates and streams. A run that needs an answer ends as
waiting (threads/waits.py), and whichever process takes the answer goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from django.conf import settings
from django.db import connections

from agents.approvals import Answer
from agents.events import BaseListener, Listeners, Outcome, RunListener
from agents.loop import AgentLoop
from agents.metrics import LIVE_RUNS, MetricsListener, record_approval
from agents.models import Agent
from agents.providers.base import ModelInfo
from agents.request import RunRequest, chat_scenario
from agents.runtime import close_providers, loop_config, provider_for, run_tools, subagent_limits, tool_context
from agents.tools.client import add_client_tools
from agents.waits import Checkpoint, Resumption, WaitKind
from runhost.policy import PolicyApprover
from runhost.registry import LiveRun, RunRegistry
from threads import selectors
from threads.dbthread import on_db_thread
from threads.locking import Contended
from threads.models import QueuedMessage, Run, Session, Thread
from threads.queue import (
    DbInbox,
    HandOver,
    queue_fate,
    queue_mark_announced,
    queue_next,
    queue_refuse,
    queue_stranded,
)
from threads.services.runs import (
    AgentUnavailable,
    OpenedThread,
    RunNotCancellable,
    ThreadConflict,
    run_cancel_request,
    run_finish,
    run_open,
)
from threads.services.transcript import message_preview
from threads.services.workspaces import workspace_open
from threads.store import DbSessionStore, DbSubAgentStore
from threads.waits import (
    ClaimAs,
    Claimed,
    ClientResult,
    Decided,
    Missing,
    run_wait,
    wait_answer,
    wait_cancel,
    wait_claim_due,
    waiting_runs_due,
)

log = logging.getLogger(__name__)

# RUN_ERROR's code when the request stored nothing because the database stayed contended: its
# sender should send the same request again (README, Errors).
RETRY = "retry"

_STATUS = {
    Outcome.SUCCESS: Run.Status.SUCCEEDED,
    Outcome.ERROR: Run.Status.FAILED,
    Outcome.CANCELLED: Run.Status.CANCELLED,
    Outcome.PAUSED: Run.Status.PAUSED,
    Outcome.INTERRUPTED: Run.Status.INTERRUPTED,
}


class ThreadStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"  # a run works on it, in this process or another
    WAITING = "waiting"  # its run waits for answers; no process holds it


@dataclass(slots=True)
class RunContext:
    """What a surface needs to know of a run it streams."""

    agui_thread_id: str
    agui_run_id: str
    run_pk: uuid.UUID
    thread: Thread
    session: Session
    agent: Agent
    model: ModelInfo
    # Calls announced in an earlier run of this agent run (before it waited): not opened again.
    announced_calls: frozenset[str] = frozenset()


@dataclass(slots=True, frozen=True)
class Flushed:
    event_count: int
    state: dict[str, Any]


class RunSurface(Protocol):
    """Where one run's events go (agui/runs.py streams them as AG-UI)."""

    def attach(self, context: RunContext) -> RunListener:
        """The run is open: the listener that hears it."""
        ...

    async def waiting(self, checkpoint: Checkpoint) -> None:
        """The run ended on calls that need answers: end the stream on them."""
        ...

    async def flush(self) -> Flushed:
        """Every event is durable; the terminal one is not yet let out."""
        ...

    def close(self, *, failed: str = "") -> None:
        """Lets the terminal event out; with ``failed``, the run could not be recorded and
        the stream ends with an error instead."""
        ...

    def refused(self, code: str, message: str) -> None:
        """The request opened no run: end the stream with this error."""
        ...

    async def hydrate(self, opened: OpenedThread) -> None:
        """Nothing to run: the thread as it stands (and any questions it waits on), then the end."""
        ...

    def queued(self, display: str) -> None:
        """The request's message was queued for the run in flight; this stream will follow it."""
        ...

    async def relay(self, run_pk: uuid.UUID, *, request_id: str, from_start: bool) -> bool:
        """Follows another run's events into this stream, until that run ends: all of them
        (``from_start``: the run the queued message started), or those from where the run read
        the message ``request_id``. True when this stream ended with it; False when the run ended
        without reading the message (nothing of it was shown)."""
        ...


class BackgroundSurfaces(Protocol):
    def __call__(self, thread: Thread, agui_run_id: str, protocol_version: str) -> RunSurface:
        """The surface of a run with nobody's request to stream into (an answer from the admin
        or the API, a deadline, a queued message that starts the next run): its log."""
        ...


@dataclass(slots=True, frozen=True)
class Start:
    """A request that brings a message (or none: then it is a hydrate)."""

    agent_name: str
    agui_thread_id: str
    agui_run_id: str
    protocol_version: str
    message: dict[str, Any] | None
    request: RunRequest
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    owner_id: int | None = None  # the user whose own token sent it (run_open keeps others out)
    from_queue: Any = None  # the queued message (threads/queue.py) this run starts with


@dataclass(slots=True, frozen=True)
class Answers:
    """A request that answers what the thread's run waits for."""

    agent_name: str
    agui_thread_id: str
    agui_run_id: str
    protocol_version: str
    decisions: dict[str, Decided]
    client_results: dict[str, ClientResult]  # by call id
    answered_by: str
    request: RunRequest
    client_tools: list[dict[str, Any]] = field(default_factory=list)


class _CancelWatch(BaseListener):
    def __init__(self, live: LiveRun) -> None:
        self.live = live

    def should_continue(self) -> bool:
        return not self.live.cancel_requested


class RunHost:
    def __init__(self) -> None:
        self.registry = RunRegistry()
        self._background: BackgroundSurfaces | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closing = False
        self._chores: set[asyncio.Task[Any]] = set()

    # -- what the views ask ---------------------------------------------

    async def thread_status(self, agui_thread_id: str) -> ThreadStatus:
        """Idle, running (in this process or another that still holds it) or waiting."""
        if self.registry.live_for_thread(agui_thread_id) is not None:
            return ThreadStatus.RUNNING
        open_run = await on_db_thread(selectors.thread_open_run, agui_thread_id=agui_thread_id)
        if open_run is None:
            return ThreadStatus.IDLE
        if open_run.status == Run.Status.WAITING:
            # Due or not: an answer past its deadline is recorded as the timeout (threads/waits.py),
            # a new message supersedes, and the sweep takes the rest within WAIT_SWEEP_SECONDS.
            return ThreadStatus.WAITING
        return ThreadStatus.RUNNING if open_run.held else ThreadStatus.IDLE

    def start(self, start: Start, surface: RunSurface) -> None:
        live = LiveRun(run_pk=uuid.uuid4(), agui_thread_id=start.agui_thread_id)
        if start.message is not None and self.registry.live_for_thread(start.agui_thread_id) is None:
            # Busy at once, before the database is asked: a second message is queued behind it.
            live.message_ids.add(start.message["id"])
            self.registry.register(live)
        self._spawn(live, self._start(live, start, surface), f"run-{start.agui_run_id}")

    def answer(self, answers: Answers, surface: RunSurface) -> None:
        live = LiveRun(run_pk=uuid.uuid4(), agui_thread_id=answers.agui_thread_id)
        self._spawn(live, self._answer(live, answers, surface), f"resume-{answers.agui_run_id}")

    async def cancel(self, run: Run) -> None:
        """Stops the run at its next safe point, wherever it runs; a waiting run ends at once.
        Raises RunNotCancellable when it has already ended."""
        live = self.registry.live_by_pk(run.pk)
        if live is not None:
            live.cancel_requested = True
            return
        if await on_db_thread(wait_cancel, run_id=run.pk):
            return
        # Owned by another process: it reads the request when it renews its lease.
        await on_db_thread(run_cancel_request, run_id=run.pk)

    # -- starting and going on ------------------------------------------

    def _spawn(self, live: LiveRun, work: Any, name: str) -> None:
        # A fresh context: the run outlives the request, so it must not inherit the
        # request's thread-sensitive executor (asgiref would keep a thread and a
        # database connection alive for it after the request ends).
        live.task = asyncio.get_running_loop().create_task(work, name=name, context=contextvars.Context())

    async def _start(self, live: LiveRun, start: Start, surface: RunSurface) -> None:
        try:
            opened = await on_db_thread(
                run_open,
                agent_name=start.agent_name,
                agui_thread_id=start.agui_thread_id,
                agui_run_id=start.agui_run_id,
                run_pk=live.run_pk,
                new_user_message=start.message,
                protocol_version=start.protocol_version,
                live_run_ids=self.registry.live_run_pks() - {live.run_pk},
                owner_id=start.owner_id,
                content=start.request.user_content() if start.message is not None else None,
                client_tools=start.client_tools,
                from_queue=start.from_queue,
            )
        except (AgentUnavailable, ThreadConflict) as exc:
            code = "unknown_agent" if isinstance(exc, AgentUnavailable) else "conflict"
            if start.from_queue is not None:
                # It will not open on a retry either: the requests that follow the message are told.
                await on_db_thread(queue_refuse, queued_pk=start.from_queue, error=f"{code}: {exc}")
            return self._refuse(live, surface, code, str(exc))
        except Contended:
            # Lost every race for the thread's rows (threads/locking.py): nothing was stored. A queued
            # message stays queued, for the sweep to try again; a client's message is its to resend.
            log.warning("run %s of thread %s: the database stayed contended", start.agui_run_id, start.agui_thread_id)
            return self._refuse(live, surface, RETRY, "the server could not store the message in time; send it again")
        except Exception:
            # A queued message stays queued: the sweep, or its request, tries again.
            log.exception("could not open run %s of thread %s", start.agui_run_id, start.agui_thread_id)
            return self._refuse(live, surface, "internal", "the server could not open the thread")
        live.message_ids |= opened.stored_message_ids
        if opened.queued is not None:
            self.registry.forget(live)
            try:
                await self._follow(opened.queued, start.agui_thread_id, surface)
            except Exception:
                # The message is stored and will be taken; only this request's view of it failed.
                log.exception("could not follow the message queued on thread %s", start.agui_thread_id)
                surface.refused("internal", "the server could not follow the run that takes the queued message")
            return
        if opened.run is None and start.from_queue is not None:
            self.registry.forget(live)  # another request or process took the message first
            return
        if opened.run is not None:
            self.registry.register(live)  # the run is this one, whatever this process registered before
        if opened.run is None:
            try:
                await surface.hydrate(opened)
            except Exception:
                # Whatever breaks a replay (a stored message the encoder refuses, a database error)
                # ends the stream with an error rather than leaving the client waiting.
                log.exception("could not replay thread %s", start.agui_thread_id)
                surface.refused("internal", "the server could not replay the thread")
            finally:
                self.registry.forget(live)
            return
        resume = Resumption(*opened.superseded) if opened.superseded is not None else None
        if resume is not None:
            _count_answers(resume.checkpoint, resume.answers)
        await self._execute(
            live,
            opened.thread,
            opened.session,
            opened.agent,
            start.agui_run_id,
            start.request,
            surface,
            resume,
            start.client_tools,
        )

    async def _answer(self, live: LiveRun, answers: Answers, surface: RunSurface) -> None:
        try:
            result = await on_db_thread(
                wait_answer,
                agui_thread_id=answers.agui_thread_id,
                decisions=answers.decisions,
                client_results=answers.client_results,
                answered_by=answers.answered_by,
                claim=ClaimAs(live.run_pk, answers.agui_run_id, answers.protocol_version),
            )
        except Contended:
            log.warning("answers on thread %s: the database stayed contended", answers.agui_thread_id)
            return self._refuse(live, surface, RETRY, "the server could not record the answer in time; send it again")
        except Exception:
            log.exception("could not answer the run waiting on thread %s", answers.agui_thread_id)
            return self._refuse(live, surface, "internal", "the server could not record the answer")
        if isinstance(result, Missing):
            message = (
                "answer every open interrupt in resume, and send the result of every pending tool call "
                f"as a tool message; not answered: {', '.join(result.answer_ids)}"
            )
            return self._refuse(live, surface, "interrupt_unanswered", message)
        if not isinstance(result, Claimed):
            # Nothing waits any more (the answer came late, or another was first): it changes
            # nothing, and the client is shown the thread as it stands.
            start = Start(
                agent_name=answers.agent_name,
                agui_thread_id=answers.agui_thread_id,
                agui_run_id=answers.agui_run_id,
                protocol_version=answers.protocol_version,
                message=None,
                request=answers.request,
            )
            return await self._start(live, start, surface)
        self.registry.register(live)
        client_tools = answers.client_tools or result.client_tools
        await self._go_on(live, result, answers.request, surface, client_tools)

    async def _go_on(
        self, live: LiveRun, claimed: Claimed, request: RunRequest, surface: RunSurface, client_tools: list[Any]
    ) -> None:
        _count_answers(claimed.checkpoint, claimed.answers)
        resume = Resumption(claimed.checkpoint, claimed.answers)
        await self._execute(
            live,
            claimed.thread,
            claimed.session,
            claimed.agent,
            claimed.run.agui_run_id,
            request,
            surface,
            resume,
            client_tools,
        )

    def _refuse(self, live: LiveRun, surface: RunSurface, code: str, message: str) -> None:
        surface.refused(code, message)
        self.registry.forget(live)

    async def _execute(
        self,
        live: LiveRun,
        thread: Thread,
        session: Session,
        agent: Agent,
        agui_run_id: str,
        request: RunRequest,
        surface: RunSurface,
        resume: Resumption | None,
        client_tools: list[dict[str, Any]],
    ) -> None:
        provider = provider_for(agent)
        announced = (
            frozenset(resume.checkpoint.done) | {c.call_id for c in resume.checkpoint.open} if resume else frozenset()
        )
        context = RunContext(
            agui_thread_id=thread.agui_thread_id,
            agui_run_id=agui_run_id,
            run_pk=live.run_pk,
            thread=thread,
            session=session,
            agent=agent,
            model=provider.info,
            announced_calls=frozenset(announced),
        )
        outcome, checkpoint = Outcome.ERROR, None
        listener: RunListener | None = None
        try:
            listener = surface.attach(context)
            # Made (from its template) only now, on a worker thread: RUN_STARTED never waits for it.
            workspace = await workspace_open(thread)
            working = tool_context(agent_name=agent.name, thread_id=thread.agui_thread_id, workspace=workspace)
            tools = await run_tools(agent)
            add_client_tools(tools, client_tools)
            loop = AgentLoop(
                provider=provider,
                tools=tools,
                tool_context=working,
                config=loop_config(agent, provider, grounding=session.grounding_override),
                store=DbSessionStore(
                    session_id=session.pk, thread_pk=thread.pk, run_pk=live.run_pk, turns=session.turns
                ),
                listener=(listeners := Listeners(listener, MetricsListener(agent.name), _CancelWatch(live))),
                approver=PolicyApprover(
                    agent_name=agent.name,
                    thread_id=thread.agui_thread_id,
                    session_id=session.pk,
                    workspace=working.workspace,
                ),
                subagent_stores=lambda started, params: DbSubAgentStore(
                    thread_pk=thread.pk, session_id=session.pk, run_pk=live.run_pk, started=started, params=params
                ),
                subagent_limits=subagent_limits(),
                inbox=DbInbox(thread_pk=thread.pk, session_id=session.pk, run_pk=live.run_pk),
            )
            live.listener = listeners
            log.info(
                "run %s of thread %s: agent %s, scenario %s%s",
                agui_run_id,
                thread.agui_thread_id,
                agent.name,
                request.scenario.name,
                ", going on after a wait" if resume else "",
            )
            outcome = await loop.run(request, run_id=agui_run_id, thread_id=thread.agui_thread_id, resume=resume)
            if outcome is Outcome.WAITING:
                checkpoint = loop.waiting
                assert checkpoint is not None
                await surface.waiting(checkpoint)
        except asyncio.CancelledError:
            outcome = Outcome.CANCELLED
        except Exception:
            log.exception("run %s of thread %s failed", agui_run_id, thread.agui_thread_id)
            outcome = Outcome.ERROR
        finally:
            self.registry.release(live)
            error = getattr(listener, "error_message", "")
            await self._record(live, thread.pk, surface, outcome, checkpoint, client_tools, error)

    async def _record(
        self,
        live: LiveRun,
        thread_pk: uuid.UUID,
        surface: RunSurface,
        outcome: Outcome,
        checkpoint: Checkpoint | None,
        client_tools: list[dict[str, Any]],
        error: str,
    ) -> None:
        """Makes the run durable, then lets its terminal event out: a client that saw
        RUN_FINISHED can rely on the run and its events being stored."""
        failed = ""
        queued = False
        try:
            flushed = await surface.flush()
            if checkpoint is not None:
                await on_db_thread(
                    run_wait,
                    run_id=live.run_pk,
                    checkpoint=checkpoint,
                    client_tools=client_tools,
                    event_count=flushed.event_count,
                    state=flushed.state,
                )
            else:
                queued = await on_db_thread(
                    run_finish,
                    run_id=live.run_pk,
                    thread_id=thread_pk,
                    status=_STATUS[outcome],
                    outcome=outcome.value,
                    error=error,
                    event_count=flushed.event_count,
                    state=flushed.state,
                )
        except Exception:
            log.exception("could not record the end of run %s", live.run_pk)
            failed = "the server could not record the run"
        finally:
            surface.close(failed=failed)
            self.registry.forget(live)
        if queued:
            # A message queued while the run worked, and not read by it, starts the next run. A run
            # that waits for an answer keeps it: the run that goes on once answered reads it.
            await self._hand_over(live.agui_thread_id)

    # -- deadlines --------------------------------------------------------

    def start_sweeper(self, background: BackgroundSurfaces) -> None:
        """Every server process looks for waiting runs that are due (a deadline passed, or every
        answer given outside a chat) and goes on with those it wins."""
        self._background = background
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(
                self._sweep(), name="wait-sweeper", context=contextvars.Context()
            )

    def stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(settings.WAIT_SWEEP_SECONDS)
            try:
                for run_id in await on_db_thread(waiting_runs_due):
                    await self._take_due(run_id)
                # Messages whose run ended with its process before it handed them over.
                stranded = await on_db_thread(
                    queue_stranded,
                    older_than=settings.WAIT_SWEEP_SECONDS * 5,
                    live_run_ids=self.registry.live_run_pks(),
                )
                for agui_thread_id in stranded:
                    await self._hand_over(agui_thread_id)
            except Exception:
                log.exception("the sweep of waiting runs failed")

    async def _take_due(self, run_id: uuid.UUID) -> bool:
        """Claims a due waiting run and goes on with it in the background, streamed to its
        thread's event log (a reattach follows it). False when another process was first."""
        if self._background is None:
            return False
        claimed = await on_db_thread(wait_claim_due, run_id=run_id, run_pk=uuid.uuid4())
        if claimed is None:
            return False
        live = LiveRun(run_pk=claimed.run.pk, agui_thread_id=claimed.thread.agui_thread_id)
        self.registry.register(live)
        surface = self._background(claimed.thread, claimed.run.agui_run_id, claimed.previous.protocol_version)
        request = RunRequest(request_id=claimed.run.agui_run_id, text="")
        self._spawn(live, self._go_on(live, claimed, request, surface, claimed.client_tools), f"due-{run_id}")
        return True

    # -- messages sent while a run is in flight (seeds/004, FireOrQueue) ----

    async def _follow(self, queued: QueuedMessage, agui_thread_id: str, surface: RunSurface) -> None:
        """Streams into the request that carried a queued message: the run in flight from where it
        reads the message, or the run the message starts once that one has ended without it."""
        surface.queued(message_preview(queued.body))
        self._announce(queued, agui_thread_id)
        request_id = queued.agui_run_id
        # How long to wait before asking again when a hand-over did not take: doubled each time,
        # so a follower whose message cannot start yet costs the database thread a few queries a
        # second at most, not twenty (a loaded process must not drown its own runs in polls).
        pause = 0.05
        while True:
            fate = await on_db_thread(queue_fate, queued_pk=queued.pk, live_run_ids=self.registry.live_run_pks())
            if fate is None:
                return surface.refused("internal", "the queued message is gone")
            if fate.status == QueuedMessage.Status.REFUSED:
                code, _, message = fate.error.partition(": ")
                return surface.refused(code, message)
            if fate.run_pk is not None:
                started = fate.status == QueuedMessage.Status.STARTED
                if not await surface.relay(fate.run_pk, request_id=request_id, from_start=started):
                    surface.refused("internal", "the run that took the message ended without it")
                return
            if fate.busy_run_pk is not None:
                if await surface.relay(fate.busy_run_pk, request_id=request_id, from_start=False):
                    return
                # That run ended without reading it: whoever is first hands the message over.
                pause = 0.05
                await asyncio.sleep(pause)
                continue
            if fate.behind_question:
                # Queued before the run put its question: it waits for the answer, then joins.
                await asyncio.sleep(settings.WAIT_SWEEP_SECONDS)
                continue
            # Nothing runs: start the message's run here, unless another process is first.
            started = await self._hand_over(agui_thread_id)
            await asyncio.sleep(pause if started else settings.WAIT_SWEEP_SECONDS)
            pause = min(pause * 2, settings.WAIT_SWEEP_SECONDS)

    def _announce(self, queued: QueuedMessage, agui_thread_id: str) -> None:
        """Tells the run in flight in this process (on_message_queued); a run in another process
        is told when it renews its lease (runhost/registry.py), or at its next tool boundary."""
        live = self.registry.live_for_thread(agui_thread_id)
        if live is None or live.listener is None:
            return
        live.listener.on_message_queued(queued.agui_run_id, message_preview(queued.body))
        self._spawn_quiet(on_db_thread(queue_mark_announced, queued_pk=queued.pk))

    def _spawn_quiet(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work, context=contextvars.Context())
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _hand_over(self, agui_thread_id: str) -> bool:
        """Starts the next run of a thread with the oldest message queued on it, if nothing runs
        there; its events go to its log, which the requests that queued messages follow. False
        when there was nothing to start (nothing queued, or a run in flight, or another was first)."""
        if self._background is None or self._closing:
            return False
        try:
            nxt: HandOver | None = await on_db_thread(queue_next, agui_thread_id=agui_thread_id)
        except Exception:
            log.exception("could not read the messages queued on thread %s", agui_thread_id)
            return False
        if nxt is None:
            return False
        request = RunRequest(
            request_id=nxt.agui_run_id,
            text="",
            content=nxt.content,
            user_id="" if nxt.owner_id is None else str(nxt.owner_id),
            scenario=chat_scenario(),
        )
        start = Start(
            agent_name=nxt.agent_name,
            agui_thread_id=agui_thread_id,
            agui_run_id=nxt.agui_run_id,
            protocol_version=nxt.protocol_version,
            message=nxt.message,
            request=request,
            client_tools=nxt.client_tools,
            owner_id=None,  # the thread's owner stays; the shared path opens it
            from_queue=nxt.queued_pk,
        )
        thread = await on_db_thread(selectors.thread_get, agui_thread_id=agui_thread_id)
        if thread is None:
            return False
        surface = self._background(thread, nxt.agui_run_id, nxt.protocol_version)
        live = LiveRun(run_pk=uuid.uuid4(), agui_thread_id=agui_thread_id)
        self._spawn(live, self._start(live, start, surface), f"queued-{nxt.agui_run_id}")
        return True

    # -- the process's end ------------------------------------------------

    async def shutdown(self, grace: float) -> None:
        """Runs in flight get ``grace`` seconds to finish and record themselves; what is still
        running then is cancelled and recorded as such. Waiting runs are in the database already,
        and so are queued messages: another process's sweep starts them."""
        self._closing = True
        self.stop_sweeper()
        tasks = self.registry.tasks()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=grace)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await close_providers()
        # Runs do their database work on asgiref's shared thread; close its connection.
        await on_db_thread(connections.close_all)

    async def drain(self) -> None:
        """Waits for every run of this process to finish and be recorded (tests, shutdown)."""
        while tasks := self.registry.tasks():
            await asyncio.gather(*tasks, return_exceptions=True)


def _count_answers(checkpoint: Checkpoint, answers: dict[str, Answer]) -> None:
    """The metrics of the answers a run goes on with (questions and approvals; not client tools)."""
    now = datetime.now(UTC)
    for call in checkpoint.answers_needed():
        answer = answers.get(call.answer_id)
        if call.kind is WaitKind.CLIENT or answer is None:
            continue
        asked = datetime.fromisoformat(call.expires_at) - timedelta(seconds=settings.APPROVAL_TIMEOUT_SECONDS)
        record_approval(call.name, answer, max(0.0, (now - asked).total_seconds()))


HOST = RunHost()
LIVE_RUNS.set_function(lambda: len(HOST.registry.tasks()))

__all__ = ["HOST", "Answers", "RunContext", "RunHost", "RunNotCancellable", "RunSurface", "Start", "ThreadStatus"]
