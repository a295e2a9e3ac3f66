"""The AG-UI surface of a run: its stream, its translator and its state document.

The run host (runhost/) runs the agent; this module is where its events become
AG-UI events and SSE frames. RUN_STARTED is published when the surface is
made, before any database work, so the first byte does not wait on it. The
SSE response that started a run is only a subscriber of its RunStream, so a
client that goes away does not stop it, and a reattach can follow it.
"""

from __future__ import annotations

import uuid
from typing import Any

import jsonpatch
import orjson
from django.conf import settings

from agents.runtime import provider_for
from agui.interrupts import suspension_outcome
from agui.relay import RunRelay, follow_stored_run, shared_layer
from agui.state import STATE_CACHE, ThreadState
from agui.stream import RunStream
from agui.translate import AguiTranslator, run_finished
from orchestrator.events import RunListener
from orchestrator.waits import Checkpoint
from runhost.host import HOST
from runhost.surface import ContinuedLog, Flushed, RunContext
from threads import selectors
from threads.dbthread import on_db_thread
from threads.eventlog import EventLogWriter
from threads.models import Run, Thread
from threads.services.runs import Hydrate
from threads.takeover import TAKEOVER_EVENT
from threads.waits import waiting_checkpoint
from vocabulary import agui as ev

# The roles a 0.0.59 client's MESSAGES_SNAPSHOT schema knows.
_V0_ROLES = ("user", "assistant", "tool", "system", "developer")


# Events a slow run's log gathers into a frame before writing it (within EVENT_LOG_MAX_DELAY_SECONDS):
# at a model's pace (40 tokens/s) a frame then holds the 20 events of half a second, not 8.
EVENT_LOG_FRAME_EVENTS = 32


def new_log(run_pk: uuid.UUID, *, takeovers: int | None = None) -> EventLogWriter:
    """The run's log writer; ``takeovers`` fences it (threads/eventlog.py)."""
    layer = shared_layer()
    return EventLogWriter(
        run_pk,
        flush_seconds=settings.EVENT_LOG_FLUSH_SECONDS,
        max_delay_seconds=settings.EVENT_LOG_MAX_DELAY_SECONDS,
        frame_events=EVENT_LOG_FRAME_EVENTS,
        batch=settings.EVENT_LOG_BATCH,
        after_write=RunRelay(layer, run_pk).send if layer is not None else None,
        takeovers=takeovers,
    )


async def transcript_for(thread: Any, *, v1: bool) -> list[dict[str, Any]]:
    """The thread's messages for MESSAGES_SNAPSHOT, as the client's protocol version takes them."""
    transcript = await on_db_thread(selectors.thread_transcript, thread=thread)
    if v1:
        return transcript
    # A 0.x client knows neither sub-agents nor their messages.
    return [m for m in transcript if m.get("role") in _V0_ROLES and "subagentRunId" not in m]


def _run_of(*, pk: Any) -> Run | None:
    return Run.objects.filter(pk=pk).first()


def _events_of(chunk: bytes) -> list[dict[str, Any]]:
    """The events in a chunk of SSE frames (``id: n\ndata: {...}\n\n``); comments are skipped."""
    events = []
    for frame in chunk.split(b"\n\n"):
        _, found, data = frame.partition(b"data: ")
        if found:
            events.append(orjson.loads(data))
    return events


def _v1_only(event: dict[str, Any]) -> bool:
    """Events a 0.x client does not know: sub-agents' (agui/translate.py gives 0.x runs none)."""
    return "subagentRunId" in event or event["type"] in ev.SUBAGENT_TYPES


class AguiRun:
    """One AG-UI run: the run host's RunSurface, streamed as SSE frames. With ``continues``, the
    continuation of a run taken over from a dead process, in its log: no second RUN_STARTED (a client
    following the run has had it), and what the log left open is closed first."""

    def __init__(
        self, *, thread_id: str, run_id: str, v1: bool, client_state: Any, continues: ContinuedLog | None = None
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.v1 = v1
        self.client_state = client_state
        self.continues = continues
        self.stream = RunStream(log=None, after=continues.after if continues else 0)
        if continues is None:
            self.stream.publish(ev.run_started(thread_id, run_id, v1=v1))
        self.translator: AguiTranslator | None = None
        self._thread: Any = None
        self._run_pk: uuid.UUID | None = None

    def _state(self, thread: Any, session_id: uuid.UUID, agent: str, model: Any) -> ThreadState:
        return ThreadState.for_run(
            STATE_CACHE.get(self.thread_id, thread.state),
            thread_id=self.thread_id,
            title=thread.title,
            session_id=str(session_id),
            agent=agent,
            model=model,
            client_state=self.client_state,
        )

    def attach(self, context: RunContext) -> RunListener:
        self._thread, self._run_pk = context.thread, context.run_pk
        self.stream.attach_log(new_log(context.run_pk, takeovers=context.takeovers))
        state = self._state(context.thread, context.session.pk, context.agent.name, context.model)
        STATE_CACHE.put(self.thread_id, state.document)
        translator = AguiTranslator(
            self.stream.publish, thread_id=self.thread_id, run_id=self.run_id, v1=self.v1, state=state
        )
        if self.continues is not None:
            # Taken over: the dead process's open messages, tool calls, steps and sub-agents are closed
            # before anything else, and the calls it announced get their results, not a second start.
            closings, logged = ev.close_log(list(self.continues.logged))
            for event in closings:
                self.stream.publish(event)
            if self.continues.takeover is not None:  # when, from which process, after which step
                self.stream.publish(ev.custom(TAKEOVER_EVENT, self.continues.takeover))
            translator.open.closed_tools |= logged.closed_tools
            # The calls of the model's last turn were streamed before it was committed, whether or not
            # the log kept their starts: a client may hold them, so they are never opened twice.
            last = context.session.turns[-1] if context.session.turns else {}
            if last.get("role") == "assistant" and isinstance(last.get("content"), list):
                translator.open.closed_tools |= {b["id"] for b in last["content"] if b.get("type") == "tool_use"}
        # A run that goes on after a wait gives the result of calls announced before it, not the calls again.
        translator.open.closed_tools |= context.announced_calls
        translator.start(announced=True)
        self.translator = translator
        return translator

    async def waiting(self, checkpoint: Checkpoint) -> None:
        assert self.translator is not None
        transcript = await transcript_for(self._thread, v1=self.v1)
        self.translator.suspend(suspension_outcome(checkpoint, v1=self.v1), transcript)

    async def flush(self) -> Flushed:
        if self.translator is None:
            # The run failed inside attach, before anything could tell of its end: its stream and
            # log still end with RUN_ERROR, and the run is recorded as failed, so its thread is
            # free at once rather than held until the lease lapses. The thread keeps its state.
            self.stream.publish(ev.run_error("the server could not start the run", "internal"))
            if self.stream.log is not None:
                await self.stream.log.close()
            stored = getattr(self._thread, "state", None)
            return Flushed(event_count=self.stream.last_seq, state=stored if isinstance(stored, dict) else {})
        if self.stream.log is not None:
            await self.stream.log.close()
        count = self.stream.last_seq if self.continues is None else self.continues.count + len(self.stream.frames)
        return Flushed(event_count=count, state=self.translator.state.document)

    def close(self, *, failed: str = "", moved: bool = False) -> None:
        if moved:
            self.stream.end_moved()
            return
        if failed:
            self.stream.replace_terminal(ev.run_error(failed, "not_recorded"))
        self.stream.close()

    def refused(self, code: str, message: str) -> None:
        if self.stream.closed:
            return
        self.stream.publish(ev.run_error(message, code))
        self.stream.close()

    def queued(self, display: str) -> None:
        self.stream.publish(ev.custom(ev.MESSAGE_QUEUED, {"requestId": self.run_id, "display": display}))

    async def relay(self, run_pk: uuid.UUID, *, request_id: str, from_start: bool) -> bool:
        """Another run's events, as this request's run: its RUN_STARTED is this stream's own (sent
        already), its terminal event carries this request's runId. Joined mid-run (from where it
        read this request's message), the steps open at that point are opened here first, so the
        stream a client verifies is whole."""
        run = await on_db_thread(_run_of, pk=run_pk)
        if run is None:
            return False
        live = HOST.registry.stream_of(run_pk)
        if live is not None and live.continues_after == 0:
            frames = live.subscribe(0, settings.AGUI_HEARTBEAT_SECONDS)
        else:
            frames = follow_stored_run(run, 0)  # the run's log first (all of it, when taken over)
        joined = from_start
        opened = ev.OpenParts()  # what the followed run has open, until the join
        state: Any = None  # the state document as the events so far left it, until the join
        publish = self.stream.publish
        async for chunk in frames:
            for event in _events_of(chunk):
                kind = event["type"]
                if not joined:
                    opened.see(event)
                    if kind == ev.STATE_SNAPSHOT:
                        state = event["snapshot"]
                    elif kind == ev.STATE_DELTA and state is not None:
                        try:
                            state = jsonpatch.apply_patch(state, event["delta"])
                        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
                            state = None  # no snapshot is better than a wrong one
                    elif kind in ev.TERMINAL_TYPES:
                        return False
                    elif (
                        kind == ev.CUSTOM
                        and event.get("name") == ev.QUEUED_MESSAGES_READ
                        and request_id in event["value"]["requestIds"]
                    ):
                        # The join point: the client gets the document the deltas from here apply
                        # to, and the steps open here, before the rest.
                        joined = True
                        if state is not None:
                            publish(ev.state_snapshot(state))
                        for step in opened.steps:
                            publish(ev.step_started(step))
                        publish(event)
                    continue
                if kind == ev.RUN_STARTED or (not self.v1 and _v1_only(event)):
                    continue
                if kind in ev.TERMINAL_TYPES:
                    publish(self._own_terminal(event))
                    self.stream.close()
                    return True
                publish(event)
        return False

    def _own_terminal(self, event: dict[str, Any]) -> dict[str, Any]:
        """The followed run's terminal event as this request's: its runId, and an outcome in the
        form this request's client takes (the followed run's client may speak the other version)."""
        if event["type"] != ev.RUN_FINISHED:
            return event  # RUN_ERROR names no run
        finished = run_finished(self.thread_id, self.run_id, v1=self.v1)
        outcome = event.get("outcome")
        if isinstance(outcome, dict) and (self.v1 or outcome.get("type") == "interrupt"):
            finished["outcome"] = outcome  # 0.x clients know the interrupt outcome, and no other
        return finished

    async def hydrate(self, opened: Hydrate) -> None:
        """Replays the thread's messages and state without running the agent; a thread whose run
        waits for answers gets its questions again, so a reloaded page can ask the person."""
        transcript = await transcript_for(opened.thread, v1=self.v1)
        state = self._state(opened.thread, opened.session.pk, opened.agent.name, provider_for(opened.agent).info)
        self.stream.publish(ev.messages_snapshot(transcript))
        self.stream.publish(ev.state_snapshot(state.document))
        finished = run_finished(self.thread_id, self.run_id, v1=self.v1)
        if opened.waiting is not None:
            outcome = suspension_outcome(waiting_checkpoint(opened.waiting), v1=self.v1)
            finished.pop("outcome", None)
            if outcome:
                finished["outcome"] = outcome
        self.stream.publish(finished)
        self.stream.close()


def background_surface(
    thread: Thread, agui_run_id: str, protocol_version: str, *, continues: ContinuedLog | None = None
) -> AguiRun:
    """A run with nobody's request to stream into (an answer from the admin or the API, a deadline,
    a queued message that starts the next run, a run taken over): its events go to its log, where the
    thread's events stream and the requests that queued messages follow it."""
    state = thread.state if isinstance(thread.state, dict) else {}
    return AguiRun(
        thread_id=thread.agui_thread_id,
        run_id=agui_run_id,
        v1=bool(protocol_version),
        client_state=state.get("client"),
        continues=continues,
    )
