"""A live run's frames: what readers get, from where, and the held-back end."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async

from agui.stream import RunStream
from tests.eventlogs import logged as logged_events
from threads.eventlog import EventLogWriter
from threads.models import Run, Thread


@pytest.fixture
def run(coder):
    thread = Thread.objects.create(agui_thread_id="t-stream", agent=coder)
    return Run.objects.create(thread=thread, agui_run_id="r-stream")


def _delta(n: int) -> dict[str, str]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"tok {n} é"}


async def _read(stream: RunStream, after: int) -> bytes:
    chunks = []
    async with asyncio.timeout(5):
        async for chunk in stream.subscribe(after, heartbeat=60):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_a_reader_gets_the_frames_after_its_id_and_the_end_only_once_the_run_is_durable(run):
    log = EventLogWriter(run.pk, flush_seconds=0.001, batch=2000)
    stream = RunStream(log)
    for n in range(1, 6):
        stream.publish(_delta(n))
    stream.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    assert stream.last_seq == 6 and stream.visible == 5  # the end waits for close()

    late = asyncio.ensure_future(_read(stream, after=3))
    await asyncio.sleep(0.05)
    assert not late.done()  # it has frames 4 and 5, and waits for the end
    await log.close()
    stream.close()
    frames = (await late).split(b"\n\n")[:-1]

    assert [f.split(b"\n")[0] for f in frames] == [b"id: 4", b"id: 5", b"id: 6"]
    assert frames[0] == b'id: 4\ndata: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"tok 4 \xc3\xa9"}'
    assert b"RUN_FINISHED" in frames[2]
    logged = [(e.seq, e.payload) for e in await sync_to_async(logged_events)(run)]
    assert [seq for seq, _ in logged] == [1, 2, 3, 4, 5, 6]
    assert [f"id: {seq}\ndata: {payload}".encode() for seq, payload in logged] == (await _read(stream, 0)).split(
        b"\n\n"
    )[:-1]


async def test_a_run_that_could_not_be_recorded_ends_its_stream_with_an_error_instead(run):
    log = EventLogWriter(run.pk, flush_seconds=0.001, batch=2000)
    stream = RunStream(log)
    stream.publish(_delta(1))
    stream.publish({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    stream.replace_terminal({"type": "RUN_ERROR", "message": "not recorded", "code": "not_recorded"})
    stream.close()
    frames = (await _read(stream, 0)).split(b"\n\n")[:-1]
    assert len(frames) == stream.last_seq == 2
    assert frames[1] == b'id: 2\ndata: {"type":"RUN_ERROR","message":"not recorded","code":"not_recorded"}'
    await log.close()
