"""The durable event log gathers events into batches instead of a round trip per event."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from threads.eventlog import EventLogWriter
from threads.models import Run, RunEvent, Thread


@pytest.fixture
def run(coder):
    thread = Thread.objects.create(agui_thread_id="t-log", agent=coder)
    return Run.objects.create(thread=thread, agui_run_id="r-log")


async def test_a_burst_of_events_is_written_in_a_few_batches(run):
    writer = EventLogWriter(run.pk, flush_seconds=0.01, batch=2000)
    for seq in range(1, 5001):
        writer.append(seq, "TEXT_MESSAGE_CONTENT", f'{{"type":"TEXT_MESSAGE_CONTENT","delta":"{seq}"}}')
    await writer.close()
    assert writer.written == 5000
    assert writer.writes <= 3
    seqs = await sync_to_async(lambda: list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)))()
    assert seqs == list(range(1, 5001))


async def test_close_waits_until_everything_is_durable(run):
    writer = EventLogWriter(run.pk, flush_seconds=10, batch=2000)
    writer.append(1, "RUN_STARTED", '{"type":"RUN_STARTED"}')
    await asyncio.sleep(0.05)  # the writer is now gathering
    async with asyncio.timeout(2):
        await writer.close()  # does not wait for the 10 s flush interval
    assert await RunEvent.objects.filter(run=run).acount() == 1
