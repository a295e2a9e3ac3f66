"""A live run's event stream: encoding, the durable log, and fan-out to subscribers.

``publish`` is the per-event hot path: encode once, keep the SSE frame for
replay, hand the payload to the batched log, wake subscribers. Subscribers read
from a cursor into the frame list and take everything that arrived since their
last read as one chunk, so a fast producer never waits on a slow reader and a
reader never costs a write per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

from threads.eventlog import EventLogWriter

HEARTBEAT = b": ping\n\n"
TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})


def sse_frame(seq: int, payload: bytes) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (seq, payload)


class RunStream:
    """The frames of one run. A logged run's terminal event is held back from
    subscribers until ``close`` (called once the run is durable): a client that
    has seen RUN_FINISHED or RUN_ERROR can rely on the run and all its events
    being recorded, in whichever process it asks next."""

    def __init__(self, log: EventLogWriter | None) -> None:
        self.frames: list[bytes] = []
        self.visible = 0  # how many frames subscribers may read
        self.log = log
        self.closed = False
        self._waiters: list[asyncio.Event] = []

    @property
    def last_seq(self) -> int:
        return len(self.frames)

    def publish(self, event: dict[str, Any]) -> None:
        payload = orjson.dumps(event)
        frames = self.frames
        seq = len(frames) + 1
        frames.append(b"id: %d\ndata: %s\n\n" % (seq, payload))
        if self.log is not None:
            self.log.append(seq, event["type"], payload.decode())
            if event["type"] in TERMINAL_TYPES:
                return
        self.visible = seq
        for waiter in self._waiters:
            waiter.set()

    def attach_log(self, log: EventLogWriter) -> None:
        """Starts logging; what was published before (RUN_STARTED, sent ahead of the
        database work) goes into the log first, so the log is complete."""
        for seq, frame in enumerate(self.frames, 1):
            payload = frame.split(b"data: ", 1)[1][:-2]
            log.append(seq, orjson.loads(payload)["type"], payload.decode())
        self.log = log

    def replace_terminal(self, event: dict[str, Any]) -> None:
        """The run could not be recorded: its held-back terminal event is not let out, ``event``
        (a RUN_ERROR) ends the stream in its place. A client is never told "finished" of a run
        that is not durable."""
        if self.frames and self.visible < len(self.frames):
            payload = orjson.dumps(event)
            self.frames[-1] = b"id: %d\ndata: %s\n\n" % (len(self.frames), payload)

    def close(self) -> None:
        """No more events; subscribers finish once they have read everything."""
        self.closed = True
        self.visible = len(self.frames)
        for waiter in self._waiters:
            waiter.set()

    async def subscribe(self, after: int, heartbeat: float) -> AsyncIterator[bytes]:
        """Yields every frame after sequence ``after``, then follows the run until it closes."""
        cursor = max(0, after)
        wake = asyncio.Event()
        self._waiters.append(wake)
        try:
            while True:
                end = self.visible
                if cursor < end:
                    frames = self.frames
                    chunk = frames[cursor] if end == cursor + 1 else b"".join(frames[cursor:end])
                    cursor = end
                    yield chunk
                    continue
                if self.closed:
                    return
                wake.clear()
                try:
                    async with asyncio.timeout(heartbeat):
                        await wake.wait()
                except TimeoutError:
                    yield HEARTBEAT
        finally:
            self._waiters.remove(wake)
