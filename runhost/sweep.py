"""The sweep: every server process looks, every WAIT_SWEEP_SECONDS, for running runs whose process
died (it takes them over: threads/takeover.py), for waiting runs that are due (a deadline passed, or
every answer given outside a chat) and for messages whose run ended with its process before it handed
them over, and has the run host go on with those it wins. Now and then (every minute, or sooner when
ATTACHMENT_UNUSED_SECONDS is shorter) it also deletes the uploads no message has named in time."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import uuid
from typing import Protocol

from django.conf import settings

from runhost.registry import RunRegistry
from threads.dbthread import on_db_thread
from threads.queue import queue_stranded
from threads.services.attachments import attachments_prune
from threads.takeover import runs_abandoned
from threads.waits import waiting_runs_due

log = logging.getLogger(__name__)


class Swept(Protocol):
    """What the sweep asks of the run host."""

    registry: RunRegistry

    async def take_due(self, run_id: uuid.UUID) -> bool: ...

    async def take_over(self, run_id: uuid.UUID) -> bool: ...

    async def hand_over(self, agui_thread_id: str) -> bool: ...


class Sweeper:
    def __init__(self, host: Swept) -> None:
        self.host = host
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._sweep(), name="wait-sweeper", context=contextvars.Context()
            )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _sweep(self) -> None:
        host = self.host
        prune_at = time.monotonic()
        while True:
            await asyncio.sleep(settings.WAIT_SWEEP_SECONDS)
            try:
                for run_id in await on_db_thread(runs_abandoned, live_run_ids=host.registry.live_run_pks()):
                    await host.take_over(run_id)
                for run_id in await on_db_thread(waiting_runs_due):
                    await host.take_due(run_id)
                stranded = await on_db_thread(
                    queue_stranded,
                    older_than=settings.WAIT_SWEEP_SECONDS * 5,
                    live_run_ids=host.registry.live_run_pks(),
                )
                for agui_thread_id in stranded:
                    await host.hand_over(agui_thread_id)
                if time.monotonic() >= prune_at:
                    prune_at = time.monotonic() + min(60.0, settings.ATTACHMENT_UNUSED_SECONDS)
                    if pruned := await on_db_thread(attachments_prune):
                        log.info(
                            "deleted %d uploads no message named within %gs", pruned, settings.ATTACHMENT_UNUSED_SECONDS
                        )
            except Exception:
                log.exception("the sweep of waiting runs failed")
