"""Following a message sent while a run is in flight (one active run per thread).

The request that carried a queued message streams the run that reads it: the run in flight, from
where it reads the message, or the run the message starts once that one has ended without it. The
run in flight in this process is told of the message at once (``LiveRun.tell_queued``); one in
another process is told when it renews its lease (runhost/registry.py), or at its next tool
boundary.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any, Protocol

from django.conf import settings

from runhost.registry import RunRegistry
from runhost.surface import RunSurface
from threads.dbthread import on_db_thread
from threads.models import QueuedMessage
from threads.queue import queue_fate, queue_mark_announced
from threads.services.transcript import message_preview

log = logging.getLogger(__name__)

# Writes nobody waits for (the mark that a message was announced); held here until they end.
_CHORES: set[asyncio.Task[Any]] = set()


class HandsOver(Protocol):
    """What following needs of the run host: its runs, and the start of a thread's next run."""

    registry: RunRegistry

    async def hand_over(self, agui_thread_id: str) -> bool: ...


async def follow_queued(host: HandsOver, queued: QueuedMessage, agui_thread_id: str, surface: RunSurface) -> None:
    """Streams into the request that carried ``queued`` until the run that reads it has ended."""
    surface.queued(message_preview(queued.body))
    _announce(host.registry, queued, agui_thread_id)
    request_id = queued.agui_run_id
    # How long to wait before asking again when a hand-over did not take: doubled each time,
    # so a follower whose message cannot start yet costs the database thread a few queries a
    # second at most, not twenty (a loaded process must not drown its own runs in polls).
    pause = 0.05
    while True:
        fate = await on_db_thread(queue_fate, queued_pk=queued.pk, live_run_ids=host.registry.live_run_pks())
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
        started = await host.hand_over(agui_thread_id)
        await asyncio.sleep(pause if started else settings.WAIT_SWEEP_SECONDS)
        pause = min(pause * 2, settings.WAIT_SWEEP_SECONDS)


def _announce(registry: RunRegistry, queued: QueuedMessage, agui_thread_id: str) -> None:
    """Tells the run in flight in this process, and marks the message told so it is told once."""
    live = registry.live_for_thread(agui_thread_id)
    if live is None or not live.tell_queued(queued.agui_run_id, message_preview(queued.body)):
        return
    task = asyncio.get_running_loop().create_task(
        on_db_thread(queue_mark_announced, queued_pk=queued.pk), context=contextvars.Context()
    )
    _CHORES.add(task)
    task.add_done_callback(_CHORES.discard)
