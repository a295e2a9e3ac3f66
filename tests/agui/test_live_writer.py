"""agui/stream.py LiveFrames.send_to: a live run's frames written to the client from the turn that
published them, in order, whatever the client's pace; the heartbeat; the end; a failed send."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agui.stream import HEARTBEAT, RunStream
from tests.sse import parse_frames


def _delta(n: int) -> dict[str, str]:
    return {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"tok {n}"}


class Client:
    """The ASGI server's side of one response: what ``send`` was given, and from where. A client
    that reads slowly makes the server's send wait (its flow control): ``hold`` does that."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.from_a_task: list[bool] = []
        self.reading = asyncio.Event()
        self.reading.set()
        self.fail: BaseException | None = None

    async def send(self, message: dict[str, Any]) -> None:
        if not self.reading.is_set():
            await self.reading.wait()
        if self.fail is not None:
            raise self.fail
        self.from_a_task.append(asyncio.current_task() is not None)
        self.bodies.append(message["body"])

    def seqs(self) -> list[int]:
        frames, _comments = parse_frames(b"".join(self.bodies))
        return [frame.id for frame in frames if frame.id is not None]


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_frames_published_in_one_turn_go_out_as_one_write_from_no_task_of_their_own() -> None:
    stream, client = RunStream(log=None), Client()
    stream.publish(_delta(1))  # before the writer: sent as it catches up
    writing = asyncio.create_task(stream.follow(0, heartbeat=60).send_to(client.send))
    await _turns()
    for n in range(2, 5):
        stream.publish(_delta(n))
    await _turns()
    stream.publish(_delta(5))
    await _turns()
    assert client.seqs() == [1, 2, 3, 4, 5]
    assert len(client.bodies) == 3  # the catch-up, the three of one turn, the last
    # What was published while the writer waited was sent from the event loop's turn, not its task.
    assert client.from_a_task == [True, False, False]
    stream.close()
    await asyncio.wait_for(writing, 5)


async def test_a_slow_client_gets_every_frame_in_order_once() -> None:
    stream, client = RunStream(log=None), Client()
    writing = asyncio.create_task(stream.follow(0, heartbeat=60).send_to(client.send))
    await _turns()
    stream.publish(_delta(1))
    await _turns()
    client.reading.clear()  # the client stops reading: the next send waits
    stream.publish(_delta(2))
    await _turns()
    for n in range(3, 7):  # published while that send waits
        stream.publish(_delta(n))
        await _turns(1)
    client.reading.set()
    await _turns()
    stream.publish(_delta(7))
    await _turns()
    stream.close()
    await asyncio.wait_for(writing, 5)
    assert client.seqs() == [1, 2, 3, 4, 5, 6, 7]


async def test_a_reader_from_an_id_gets_what_follows_it_and_ends_with_the_stream() -> None:
    stream, client = RunStream(log=None), Client()
    for n in range(1, 4):
        stream.publish(_delta(n))
    writing = asyncio.create_task(stream.follow(2, heartbeat=60).send_to(client.send))
    await _turns()
    stream.publish(_delta(4))
    stream.close()
    await asyncio.wait_for(writing, 5)
    assert client.seqs() == [3, 4]
    assert stream.subscribers == 0


async def test_an_idle_stream_sends_heartbeats_and_a_busy_one_does_not() -> None:
    stream, client = RunStream(log=None), Client()
    writing = asyncio.create_task(stream.follow(0, heartbeat=0.05).send_to(client.send))
    await asyncio.sleep(0.2)
    assert HEARTBEAT in client.bodies
    client.bodies.clear()
    for n in range(1, 8):
        stream.publish(_delta(n))
        await asyncio.sleep(0.02)
    assert HEARTBEAT not in client.bodies
    stream.close()
    await asyncio.wait_for(writing, 5)


async def test_a_send_that_fails_ends_that_writer_with_its_error_and_not_the_run() -> None:
    stream, broken, fine = RunStream(log=None), Client(), Client()
    failing = asyncio.create_task(stream.follow(0, heartbeat=60).send_to(broken.send))
    writing = asyncio.create_task(stream.follow(0, heartbeat=60).send_to(fine.send))
    await _turns()
    broken.fail = ConnectionResetError("the client went away")
    stream.publish(_delta(1))  # the failing send is made from the loop's turn: its writer raises it
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(failing, 5)
    stream.publish(_delta(2))
    stream.close()
    await asyncio.wait_for(writing, 5)
    assert fine.seqs() == [1, 2]
    assert stream.subscribers == 0


async def test_a_writer_cancelled_while_its_send_waits_leaves_the_stream() -> None:
    stream, client = RunStream(log=None), Client()
    writing = asyncio.create_task(stream.follow(0, heartbeat=60).send_to(client.send))
    await _turns()
    client.reading.clear()
    stream.publish(_delta(1))
    await _turns()
    writing.cancel()  # the client disconnected
    with pytest.raises(asyncio.CancelledError):
        await writing
    assert stream.subscribers == 0
    stream.publish(_delta(2))  # nothing is written to a writer that has gone
    await _turns()
    assert client.bodies == []
