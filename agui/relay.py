"""Cross-process fan-out of a run's events through the Channels layer.

With several server processes (REDIS_URL set), a reattach can reach a process
that does not own the run. The owner sends each batch to the run's group once
the batch is durable; a follower joins the group first, replays the log, then
takes the live batches, skipping what it has and reading any gap from the log.
Without a shared layer (one process) the follower falls back to polling the log.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

import orjson
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from django.utils import timezone

from agui.stream import sse_frame
from runhost.host import HOST
from threads import leases, selectors
from threads.dbthread import on_db_thread
from threads.eventlog import Rows
from threads.healing import runs_heal
from threads.models import Run
from vocabulary import agui as ev

log = logging.getLogger(__name__)
POLL_SECONDS = 0.25
REPLAY_PAGE = 2000
# What a reattach to a run whose log was removed (manage.py prune_event_logs) is told.
PRUNED = ev.run_error(
    "this run's event log was removed after EVENT_LOG_RETENTION_DAYS; its messages remain in the thread",
    "event_log_pruned",
)


def _run_status(*, run_pk: uuid.UUID) -> tuple[str, int, str, Any] | None:
    return Run.objects.filter(pk=run_pk).values_list("status", "event_count", "owner", "lease_expires_at").first()


def group_name(run_pk: uuid.UUID) -> str:
    return f"run.{run_pk.hex if hasattr(run_pk, 'hex') else run_pk}"


def shared_layer() -> BaseChannelLayer | None:
    """The channel layer when it reaches other processes, else None."""
    layer = get_channel_layer()
    return None if layer is None or isinstance(layer, InMemoryChannelLayer) else layer


class RunRelay:
    """The owner's side: each durable batch goes to the run's group."""

    def __init__(self, layer: BaseChannelLayer, run_pk: uuid.UUID) -> None:
        self.layer = layer
        self.group = group_name(run_pk)

    async def send(self, rows: Rows) -> None:
        await self.layer.group_send(self.group, {"type": "run.events", "events": [list(row) for row in rows]})


async def follow_stored_run(run: Run, after: int) -> AsyncGenerator[bytes, None]:
    """Frames of a run this process does not own: the log after ``after``, then the rest as it comes.
    A channel layer that fails (Redis lost) is left for polling the log, which has every event the
    layer would have brought: the follower still gets the run's end (issue #49 item 8)."""
    layer = shared_layer()
    channel = ""
    if layer is not None:
        try:
            channel = await layer.new_channel()
            await layer.group_add(group_name(run.pk), channel)
        except Exception as exc:
            _layer_lost(run, exc)
            layer = None
    cursor = after
    ended = False
    try:
        if run.events_pruned_at is not None:
            yield sse_frame(cursor + 1, orjson.dumps(PRUNED))
            return
        while True:
            # The log first: everything up to now, in pages.
            # On the database thread: a follower may stay open for as long as the run lasts, and
            # must not hold an OS thread (and a connection) of its own meanwhile.
            events = await on_db_thread(selectors.run_events_after, run=run, after=cursor, limit=REPLAY_PAGE)
            for event in events:
                cursor = event.seq
                if event.type in ev.TERMINAL_TYPES:
                    await _recorded(run)
                    yield sse_frame(event.seq, event.payload.encode())
                    return
                yield sse_frame(event.seq, event.payload.encode())
            if len(events) >= REPLAY_PAGE:
                continue
            row = await on_db_thread(_run_status, run_pk=run.pk)
            if row is None or row[0] != Run.Status.RUNNING:
                if row is not None and not ended:
                    ended = True  # it may have ended after the read above: read its log once more
                    continue
                if row is not None:
                    # A Last-Event-ID past the log's end (no client was given one: a healed end lies
                    # past anything a dead process streamed, threads/healing.py) still gets the end.
                    last = await on_db_thread(selectors.run_last_event, run=run)
                    if last is not None and last.seq < cursor and last.type in ev.TERMINAL_TYPES:
                        yield sse_frame(last.seq, last.payload.encode())
                return
            if leases.owner_is_gone(row[2], row[3]):
                # The process running it died: this one takes it over (or, when it cannot go on, ends
                # its log: threads/takeover.py), then reads on. A process that takes nothing over
                # (no sweep runs in it) ends the log itself, so the follower is never left waiting;
                # one that drains leaves it to the others (a run handed over is theirs to go on with).
                if not await HOST.take_over(run.pk):
                    if not HOST.takes_over and not HOST.draining:
                        await on_db_thread(runs_heal, run_ids=[run.pk], now=timezone.now())
                    await asyncio.sleep(POLL_SECONDS)
                continue
            yield b": waiting\n\n"
            if layer is None:
                await asyncio.sleep(POLL_SECONDS)
                continue
            # Then live batches until one leaves a gap (read from the log) or the run ends.
            while layer is not None:
                try:
                    async with asyncio.timeout(POLL_SECONDS * 4):
                        message = await layer.receive(channel)
                except TimeoutError:
                    break  # re-check the log and the run's status
                except Exception as exc:
                    _layer_lost(run, exc)
                    layer = None
                    break
                rows = [row for row in message["events"] if row[0] > cursor]
                if rows and rows[0][0] != cursor + 1:
                    break
                for seq, type_, payload in rows:
                    cursor = seq
                    if type_ in ev.TERMINAL_TYPES:
                        await _recorded(run)
                        yield sse_frame(seq, payload.encode())
                        return
                    yield sse_frame(seq, payload.encode())
    finally:
        if layer is not None:
            try:
                await layer.group_discard(group_name(run.pk), channel)
            except Exception as exc:
                log.warning("could not leave the relay group of run %s: %s", run.pk, exc)


# How long a follower waits for the run's row to say it ended once its log holds the end.
RECORDED_SECONDS = 10.0


async def _recorded(run: Run) -> None:
    """Returns once the run's row no longer says it runs. Its log holds the terminal event a moment
    before the row is marked (runhost/recording.py: every event is made durable, then the run's end
    recorded): a client of this process told the run finished must find it so in any process it asks
    next, as the run's own subscribers do (agui/stream.py). Gives up after RECORDED_SECONDS, or when
    the run's process is gone (then the end in its log is all there will be)."""
    if run.status != Run.Status.RUNNING:
        return  # it had ended when the client asked (a replay)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RECORDED_SECONDS
    while (row := await on_db_thread(_run_status, run_pk=run.pk)) is not None and row[0] == Run.Status.RUNNING:
        if loop.time() > deadline or leases.owner_is_gone(row[2], row[3]):
            return
        await asyncio.sleep(0.02)


def _layer_lost(run: Run, exc: Exception) -> None:
    log.warning("the channel layer failed while following run %s (%s); polling its log instead", run.pk, exc)
