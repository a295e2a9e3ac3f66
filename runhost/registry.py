"""The runs this process executes: one active run per thread, and the leases that say so to other processes."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.events import RunListener
from threads.dbthread import on_lease_thread
from threads.leases import lease_length
from threads.queue import queue_announce
from threads.services.runs import leases_renew

log = logging.getLogger(__name__)


class Followed(Protocol):
    """What a client is sent of a live run (agui/stream.py LiveFrames): read as it comes, or
    written to an ASGI ``send`` until the run ends."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def send_to(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None: ...


class LiveStream(Protocol):
    """A run's stream as a reattach in this process follows it (agui/stream.py RunStream).
    ``continues_after``: the seq the stream's first event follows (0, unless it continues the log
    of a run taken over: the events up to there are in the log only)."""

    continues_after: int

    def drop_log(self) -> None: ...

    def hand_over(self) -> None: ...

    def subscribe(self, after: int, heartbeat: float) -> AsyncGenerator[bytes, None]: ...

    def follow(self, after: int, heartbeat: float) -> Followed: ...


@dataclass(slots=True)
class LiveRun:
    """A run this process executes: its task, its cancel, what hears it and its live stream."""

    run_pk: uuid.UUID
    agui_thread_id: str
    task: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    # Set with cancel_requested: the run's tool calls that can stop in flight wait on it.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    listener: RunListener | None = None  # what hears the run, once its loop is built
    stream: LiveStream | None = None  # its events as they are made, once it is attached
    # Another process took the run over (this one renewed its lease too late): it stops, and
    # records nothing, the run being the other's now.
    lost: bool = False
    # The process is shutting down: the run stops and is handed over to another (its lease released).
    handing_over: bool = False
    # How often the run had been taken over when this process took it (0: it started it here);
    # every write of its steps and its end checks it is unchanged (threads/takeover.py still_ours).
    takeovers: int = 0

    def lose(self) -> None:
        """Another process took the run over: it stops here, writes nothing more to the run's log,
        and records nothing (the run is the other's)."""
        self.lost = True
        if self.stream is not None:
            self.stream.drop_log()
        self.request_cancel()

    def request_cancel(self) -> None:
        """Stops the run at its next safe point, and a call in flight that can stop, now."""
        self.cancel_requested = True
        self.cancelled.set()

    def tell_queued(self, request_id: str, display: str) -> bool:
        """The one place a run in flight is told of a message queued for it (on_message_queued):
        False when nothing hears it yet."""
        if self.listener is None:
            return False
        try:
            self.listener.on_message_queued(request_id, display)
        except Exception:
            # A listener that breaks must not break its caller (the lease renewals, above all:
            # every run here would lose its lease in RUN_LEASE_SECONDS and be taken for abandoned).
            log.exception("a listener of run %s failed on a queued message", self.run_pk)
        return True


@dataclass(slots=True)
class RunRegistry:
    """The runs this process executes, by thread (one active run per thread)."""

    by_thread: dict[str, LiveRun] = field(default_factory=dict)
    # Runs whose loop has ended but which are still being recorded: no longer busy, but still
    # held (their lease renewed) so that no other process takes them for abandoned.
    finishing: dict[Any, LiveRun] = field(default_factory=dict)
    _renewer: asyncio.Task[None] | None = None

    def register(self, live: LiveRun) -> None:
        """Makes the thread busy with ``live`` and keeps this process's leases on its runs renewed."""
        self.by_thread[live.agui_thread_id] = live
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(
                self._renew_leases(), name="run-leases", context=contextvars.Context()
            )

    async def _renew_leases(self) -> None:
        while self.by_thread or self.finishing:
            await asyncio.sleep(lease_length().total_seconds() / 3)
            run_ids = list(self.live_run_pks())
            if run_ids:
                try:
                    renewed = await on_lease_thread(leases_renew, run_ids=run_ids)
                except Exception:
                    log.exception("could not renew the leases of %d runs", len(run_ids))
                    continue
                for run_pk in renewed.cancelled:  # cancels that reached another process
                    if live := self.live_by_pk(run_pk):
                        live.request_cancel()
                for run_pk in renewed.lost:
                    # A run handed over (its process drains) was let go by this process: not lost.
                    if (live := self.live_by_pk(run_pk)) and not live.handing_over:
                        log.error("run %s was taken over by another process: this one stops it", run_pk)
                        live.lose()
                try:
                    queued = await on_lease_thread(queue_announce, run_ids=run_ids)
                except Exception:
                    log.exception("could not read the messages queued for %d runs", len(run_ids))
                    continue
                for run_pk, request_id, display in queued:  # messages queued in another process
                    live = self.live_by_pk(run_pk)
                    if live is not None and live.run_pk not in self.finishing:
                        live.tell_queued(request_id, display)

    def live_for_thread(self, agui_thread_id: str) -> LiveRun | None:
        return self.by_thread.get(agui_thread_id)

    def live_by_pk(self, run_pk: uuid.UUID) -> LiveRun | None:
        for live in self.by_thread.values():
            if live.run_pk == run_pk:
                return live
        return self.finishing.get(run_pk)

    def live_run_pks(self) -> set[uuid.UUID]:
        return {r.run_pk for r in self.by_thread.values()} | set(self.finishing)

    def release(self, live: LiveRun) -> None:
        """The run's loop has ended: the thread is free, the run is still being recorded."""
        if self.by_thread.get(live.agui_thread_id) is live:
            del self.by_thread[live.agui_thread_id]
        self.finishing[live.run_pk] = live

    def forget(self, live: LiveRun) -> None:
        """The run is recorded (or was never opened): nothing here refers to it any more."""
        if self.by_thread.get(live.agui_thread_id) is live:
            del self.by_thread[live.agui_thread_id]
        self.finishing.pop(live.run_pk, None)
        # Its listeners watch it (the cancel check), so holding them made a reference cycle that
        # kept the run's stream and frames alive until the next full collection.
        live.listener = None
        live.stream = None

    def stream_of(self, run_pk: uuid.UUID) -> LiveStream | None:
        """The live stream of a run this process executes, for a reattach here."""
        live = self.live_by_pk(run_pk)
        return live.stream if live is not None else None

    def streams(self) -> list[LiveStream]:
        return [r.stream for r in [*self.by_thread.values(), *self.finishing.values()] if r.stream is not None]

    def running(self) -> list[LiveRun]:
        """The runs at work (not those being recorded)."""
        return list(self.by_thread.values())

    def tasks(self) -> list[asyncio.Task[None]]:
        return [r.task for r in [*self.by_thread.values(), *self.finishing.values()] if r.task]
