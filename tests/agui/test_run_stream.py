"""A live run's frames: what readers get, from where, and the held-back end."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from agui.relay import follow_stored_run
from agui.stream import RunStream
from tests.eventlogs import logged as logged_events
from threads import leases
from threads.eventlog import EventLogWriter, insert_events
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


async def _shown_within(stream: RunStream, count: int, seconds: float) -> float:
    """How long until a reader from the start has ``count`` frames (fails past ``seconds``)."""
    loop = asyncio.get_running_loop()
    started, shown = loop.time(), 0
    async with asyncio.timeout(seconds):
        async for chunk in stream.subscribe(0, heartbeat=60):
            shown += chunk.count(b"\n\n")
            if shown >= count:
                break
    return loop.time() - started


@pytest.mark.parametrize(
    "held",
    [
        {"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"},
        {"type": "TEXT_MESSAGE_END", "messageId": "m"},
        {"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "bash"},
        {"type": "STEP_FINISHED", "stepName": "s"},
    ],
    ids=lambda event: event["type"],
)
async def test_an_event_that_opens_or_closes_a_part_is_shown_once_logged_and_the_log_hurries_it(run, held):
    """Gathering as a run at a model's pace does (a frame waits up to 10 s for 32 events), the log
    writes an opening or closing event at once: a client following the run waits one write for it,
    not the gathering. Until it is logged, neither it nor what follows is shown: a process that dies
    meanwhile leaves no client holding a part its log never opened, or a close it never kept."""
    stream = RunStream(None)
    log = EventLogWriter(run.pk, flush_seconds=0.05, max_delay_seconds=10, frame_events=32, batch=2000)
    stream.attach_log(log)  # as a run's surface does (agui/runs.py)
    stream.publish(_delta(1))
    await _shown_within(stream, 1, seconds=2)  # a delta waits for nothing
    stream.publish(held)
    stream.publish(_delta(2))
    assert stream.visible == 1  # neither the held event nor the delta after it, yet
    waited = await _shown_within(stream, 3, seconds=2)  # hurried: not the 10 s of gathering
    assert log.durable >= 2 and waited < 2
    logged = [e.type for e in await sync_to_async(logged_events)(run)]
    assert logged[:2] == ["TEXT_MESSAGE_CONTENT", held["type"]]
    await log.close()


@pytest.mark.django_db(transaction=True)
async def test_a_follower_in_another_process_is_told_the_run_ended_only_once_its_row_says_so(coder):
    """A process that does not own a run follows it from its log (agui/relay.py). The log holds the
    run's end a moment before the run's row is marked (every event is made durable, then the end is
    recorded): the follower holds RUN_FINISHED until the row says so, so a client told "finished"
    finds the run finished wherever it asks next."""
    thread = await Thread.objects.acreate(agui_thread_id="t-follow-end", agent=coder)
    run = await Run.objects.acreate(
        thread=thread,
        agui_run_id="r1",
        owner=leases.owner_id(),
        lease_expires_at=timezone.now() + timedelta(seconds=60),
    )
    finished = '{"type":"RUN_FINISHED","threadId":"t-follow-end","runId":"r1"}'
    await sync_to_async(insert_events)(run.pk, [(1, "RUN_STARTED", "{}"), (2, "RUN_FINISHED", finished)])
    loop = asyncio.get_running_loop()
    frames: list[tuple[float, bytes]] = []

    async def follow() -> None:
        async for chunk in follow_stored_run(await Run.objects.aget(pk=run.pk), 0):
            frames.append((loop.time(), chunk))

    following = asyncio.ensure_future(follow())
    await asyncio.sleep(0.5)
    assert frames and not any(b"RUN_FINISHED" in chunk for _, chunk in frames)
    marked = loop.time()
    await Run.objects.filter(pk=run.pk).aupdate(status=Run.Status.SUCCEEDED)
    async with asyncio.timeout(5):
        await following
    told, last = frames[-1]
    assert last == f"id: 2\ndata: {finished}\n\n".encode() and told >= marked
