"""The run host: starts runs, goes on with waiting ones, cancels, sweeps deadlines, shuts down.

One AG-UI request reads straight down: the view decodes it and asks the host
(``start`` or ``answer``); the host opens or claims the run in the database,
executes it (runhost/execute.py: the loop built and run with the surface's
listener) and records its end (runhost/recording.py); the surface (agui/)
translates and streams. A run that needs an answer ends as
waiting (threads/waits.py), and whichever process takes the answer goes on.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import connections

from agents.metrics import LIVE_RUNS
from agents.models import Agent
from agents.runtime import close_providers
from orchestrator.budget import BUDGET_EXCEEDED
from orchestrator.request import RunRequest
from orchestrator.takeover import Takeover
from orchestrator.waits import Resumption
from runhost.budgets import SpendMeter, budget_reached
from runhost.drain import at_step_boundary, hand_over_now
from runhost.execute import Execution, RunEnd, execute
from runhost.following import follow_queued
from runhost.recording import record_run
from runhost.registry import LiveRun, RunRegistry
from runhost.requests import Answers, Start, ThreadStatus, start_of_queued
from runhost.surface import BackgroundSurfaces, ContinuedLog, Flushed, RunContext, RunSurface
from runhost.sweep import Sweeper
from runhost.tallies import RunTallies
from threads import selectors
from threads.dbthread import on_db_thread, on_db_thread_shared
from threads.locking import Contended
from threads.models import Run, Session, Thread
from threads.queue import HandOver, queue_next, queue_refuse
from threads.services.runs import (
    AgentUnavailable,
    Hydrate,
    Queued,
    RunNotCancellable,
    Started,
    TakenElsewhere,
    ThreadConflict,
    run_cancel,
    run_open,
)
from threads.takeover import run_take_over
from threads.waits import ClaimAs, Claimed, Missing, wait_answer, wait_claim_due

log = logging.getLogger(__name__)

# RUN_ERROR's code when the request stored nothing because the database stayed contended: its
# sender should send the same request again (docs/protocol.md, Errors).
RETRY = "retry"
# RUN_ERROR's code when what the request sent is stored but this stream cannot follow its run: its
# sender should reattach to the thread, not send it again.
REATTACH = "reattach"


class RunHost:
    def __init__(self) -> None:
        self.registry = RunRegistry()
        self._background: BackgroundSurfaces | None = None
        self._sweeper = Sweeper(self)
        self._closing = False

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
            live.request_cancel()
            return
        await on_db_thread(run_cancel, run_id=run.pk)

    # -- starting and going on ------------------------------------------

    def _spawn(self, live: LiveRun, work: Any, name: str) -> None:
        # A fresh context: the run outlives the request, so it must not inherit the
        # request's thread-sensitive executor (asgiref would keep a thread and a
        # database connection alive for it after the request ends).
        live.task = asyncio.get_running_loop().create_task(work, name=name, context=contextvars.Context())

    async def _start(self, live: LiveRun, start: Start, surface: RunSurface) -> None:
        if start.message is not None and start.from_queue is None:
            # A message that would start a run over a spend cap is refused before anything is stored
            # or the model is called. A queued message is stored already: its run stops at its first
            # step instead (orchestrator/steps.py).
            try:
                reached = await on_db_thread(
                    budget_reached,
                    agent_name=start.agent_name,
                    agui_thread_id=start.agui_thread_id,
                    owner_id=start.owner_id,
                )
            except Exception:
                log.exception("could not read the spend caps of thread %s", start.agui_thread_id)
                return self._refuse(live, surface, "internal", "the server could not read the spend caps")
            if reached is not None:
                return self._refuse(live, surface, BUDGET_EXCEEDED, reached.refusal())
        try:
            opened = await on_db_thread_shared(
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
        match opened:
            case Queued(queued=queued):
                self.registry.forget(live)
                try:
                    await follow_queued(self, queued, start.agui_thread_id, surface)
                except Exception:
                    # The message is stored and will be taken; only this request's view of it failed.
                    # "internal" made clients send it again (issue #49 item 8).
                    log.exception("could not follow the message queued on thread %s", start.agui_thread_id)
                    surface.refused(
                        REATTACH,
                        "the message is stored and a run will answer it; do not send it again, "
                        "reattach to the thread to follow that run",
                    )
            case TakenElsewhere():
                self.registry.forget(live)
            case Hydrate() as hydrate:
                try:
                    await surface.hydrate(hydrate)
                except Exception:
                    # Whatever breaks a replay (a stored message the encoder refuses, a database error)
                    # ends the stream with an error rather than leaving the client waiting.
                    log.exception("could not replay thread %s", start.agui_thread_id)
                    surface.refused("internal", "the server could not replay the thread")
                finally:
                    self.registry.forget(live)
            case Started() as started:
                self.registry.register(live)  # the run is this one, whatever this process registered before
                # The answers that closed the waiting run are counted once, where every path goes on.
                resume = Resumption(*started.superseded) if started.superseded is not None else None
                await self._execute(
                    live,
                    started.thread,
                    started.session,
                    started.agent,
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
        takeover: Takeover | None = None,
    ) -> None:
        # A run is paid for by its thread's owner; an unowned thread's by the shared token.
        meter = SpendMeter(agent=agent, user_id=thread.owner_id)
        tallies = RunTallies(agent_id=agent.pk)  # the dashboard's (threads/dashboard.py)
        end = RunEnd()
        try:
            run = Execution(thread, session, agent, agui_run_id, request, resume, client_tools, takeover)
            await execute(live, run, surface, end, meter, tallies, at_step_boundary(live, self))
        finally:
            self.registry.release(live)
            try:
                await meter.flush()
            except Exception:
                log.exception("could not record the spend of run %s", agui_run_id)
            if not (live.lost or live.handing_over):  # else another process goes on with it
                await tallies.record(end.outcome)
            try:
                queued = await record_run(live, thread.pk, surface, end, client_tools)
            finally:
                self.registry.forget(live)
        if queued:
            # A message queued while the run worked, and not read by it, starts the next run. A run
            # that waits for an answer keeps it: the run that goes on once answered reads it.
            await self.hand_over(live.agui_thread_id)

    # -- deadlines and queued messages ------------------------------------

    def start_sweeper(self, background: BackgroundSurfaces) -> None:
        """Every server process sweeps for waiting runs that are due and messages left queued
        (runhost/sweep.py); what it takes runs with a ``background`` surface."""
        self._background = background
        self._sweeper.start()

    @property
    def takes_over(self) -> bool:
        """The sweep runs here: this process takes over runs whose process died."""
        return self._background is not None and not self._closing

    def stop_sweeper(self) -> None:
        self._sweeper.stop()

    async def take_due(self, run_id: uuid.UUID) -> bool:
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

    async def take_over(self, run_id: uuid.UUID) -> bool:
        """Claims a running run whose process died and goes on with it here from its last step,
        in its own event log (threads/takeover.py). False when another process was first, its owner
        lives, or it could not go on (it was healed instead)."""
        if self._background is None or self._closing:
            return False
        try:
            taken = await on_db_thread(run_take_over, run_id=run_id)
        except Exception:
            log.exception("could not take run %s over", run_id)
            return False
        if taken is None:
            return False
        run, thread = taken.run, taken.thread
        log.warning(
            "run %s of thread %s taken over from a dead process (takeover %d, iteration %d)",
            run.agui_run_id,
            thread.agui_thread_id,
            run.takeovers,
            taken.checkpoint.counters.iteration,
        )
        live = LiveRun(run_pk=run.pk, agui_thread_id=thread.agui_thread_id, takeovers=run.takeovers)
        self.registry.register(live)
        continues = ContinuedLog(after=taken.after, logged=tuple(taken.logged), count=taken.count, takeover=taken.shown)
        surface = self._background(thread, run.agui_run_id, run.protocol_version, continues=continues)
        request = RunRequest(request_id=run.agui_run_id, text="")
        going_on = self._execute(
            live,
            thread,
            taken.session,
            taken.agent,
            run.agui_run_id,
            request,
            surface,
            None,
            taken.client_tools,
            Takeover(taken.checkpoint, taken.user_turn),
        )
        self._spawn(live, going_on, f"takeover-{run_id}")
        return True

    async def hand_over(self, agui_thread_id: str) -> bool:
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
        start = start_of_queued(nxt, agui_thread_id)
        thread = await on_db_thread(selectors.thread_get, agui_thread_id=agui_thread_id)
        if thread is None:
            return False
        surface = self._background(thread, nxt.agui_run_id, nxt.protocol_version)
        live = LiveRun(run_pk=uuid.uuid4(), agui_thread_id=agui_thread_id)
        self._spawn(live, self._start(live, start, surface), f"queued-{nxt.agui_run_id}")
        return True

    # -- the process's end ------------------------------------------------

    @property
    def draining(self) -> bool:
        """The process drains (runhost/drain.py): it takes no new run, and hands its runs over."""
        return self._closing

    async def drain_for_exit(self, seconds: float) -> None:
        """Drains (runhost/drain.py): runs in flight hand themselves over at their next step
        boundary, or finish, within ``seconds``; what is still inside a step then is stopped there and
        handed over (with RUN_MAX_TAKEOVERS 0: cancelled and recorded as such). Waiting runs are in
        the database already, and so are queued messages: another process's sweep starts them."""
        self._closing = True
        self.stop_sweeper()
        tasks = self.registry.tasks()
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=seconds)
            if settings.RUN_MAX_TAKEOVERS:
                for live in self.registry.running():
                    if live.task in pending:
                        hand_over_now(live)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)

    async def shutdown(self, drain: float) -> None:
        """Drains (``drain_for_exit``; at once when a signal drained the process already), then lets go
        of the model clients and the database connections."""
        await self.drain_for_exit(drain)
        await close_providers()
        # Runs do their database work on asgiref's shared thread; close its connection.
        await on_db_thread(connections.close_all)

    async def drain(self) -> None:
        """Waits for every run of this process to finish and be recorded (tests, shutdown)."""
        while tasks := self.registry.tasks():
            await asyncio.gather(*tasks, return_exceptions=True)


HOST = RunHost()
LIVE_RUNS.set_function(lambda: len(HOST.registry.tasks()))

__all__ = [
    "HOST",
    "Answers",
    "Flushed",
    "RunContext",
    "RunHost",
    "RunNotCancellable",
    "RunSurface",
    "Start",
    "ThreadStatus",
]
