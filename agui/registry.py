"""The runs this process owns: one active run per thread, and the leases that say so to other processes."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from agents.runtime import close_providers
from agents.tools.base import ToolRegistry
from agui.approvals import Waiting
from agui.stream import RunStream
from agui.translate import AguiTranslator
from threads.dbthread import on_db_thread
from threads.leases import lease_length
from threads.services import leases_renew

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LiveRun:
    run_pk: Any
    agui_run_id: str
    agui_thread_id: str
    stream: RunStream
    task: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    message_ids: set[str] = field(default_factory=set)  # the thread's messages, as far as this run knows
    waiting: Waiting = field(default_factory=Waiting)  # approvals the agent run waits for
    # The current AG-UI run has ended on interrupts; the agent run goes on in the next one.
    suspended: bool = False
    translator: AguiTranslator | None = None
    registry_tools: ToolRegistry | None = None  # the run's tools, the client's own among them


@dataclass(slots=True)
class RunRegistry:
    """The runs this process owns, by thread (one active run per thread)."""

    by_thread: dict[str, LiveRun] = field(default_factory=dict)
    # Runs whose loop has ended but which are still being recorded (their
    # terminal event waits for that): no longer busy, but still followable by
    # a reattach and not to be mistaken for abandoned runs.
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
                    cancelled = await on_db_thread(leases_renew, run_ids=run_ids)
                except Exception:
                    log.exception("could not renew the leases of %d runs", len(run_ids))
                    continue
                for run_pk in cancelled:  # cancels that reached another process
                    if live := self.live_by_pk(run_pk):
                        live.cancel_requested = True
                        live.waiting.cancel_all()

    def live_for_thread(self, agui_thread_id: str) -> LiveRun | None:
        return self.by_thread.get(agui_thread_id)

    def live_by_pk(self, run_pk: Any) -> LiveRun | None:
        for live in self.by_thread.values():
            if live.run_pk == run_pk:
                return live
        return self.finishing.get(run_pk)

    def live_run_pks(self) -> set[Any]:
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

    async def shutdown(self, grace: float) -> None:
        tasks = [r.task for r in [*self.by_thread.values(), *self.finishing.values()] if r.task]
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
        """Waits for every run to finish and be recorded (used at shutdown and by tests)."""
        tasks = [r.task for r in [*self.by_thread.values(), *self.finishing.values()] if r.task]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


REGISTRY = RunRegistry()
