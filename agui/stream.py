"""A live run's event stream: encoding, the durable log, and fan-out to subscribers.

``publish`` is the per-event hot path: encode once, keep the SSE frame for
replay, hand the payload to the batched log, wake subscribers. Subscribers read
from a cursor into the frame list and take everything that arrived since their
last read as one chunk, so a fast producer never waits on a slow reader and a
reader never costs a write per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import orjson

from threads.eventlog import EventLogWriter
from vocabulary import agui as ev

HEARTBEAT = b": ping\n\n"


def encode_event(event: dict[str, Any]) -> bytes:
    """The event as JSON. An integer past 64 bits, which orjson will not write, is written as the
    float it reads as in JavaScript: PostgreSQL's jsonb gives a large float back as an integer
    (1e22 comes back as 10000000000000000000000), so a client's state of ``{"n": 1e22}`` made
    every later run of its thread fail to start."""
    try:
        return orjson.dumps(event)
    except TypeError:
        return orjson.dumps(_wide_ints_as_floats(event))


_INT64 = range(-(2**63), 2**64)


def _wide_ints_as_floats(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _wide_ints_as_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_wide_ints_as_floats(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
        return float(value)
    return value


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

    @property
    def subscribers(self) -> int:
        return len(self._waiters)

    def publish(self, event: dict[str, Any]) -> None:
        payload = encode_event(event)
        frames = self.frames
        seq = len(frames) + 1
        frames.append(b"id: %d\ndata: %s\n\n" % (seq, payload))  # sse_frame, inlined on the per-event path
        if self.log is not None:
            self.log.append(seq, event["type"], payload.decode())
            if event["type"] in ev.TERMINAL_TYPES:
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
            payload = encode_event(event)
            self.frames[-1] = sse_frame(len(self.frames), payload)

    def close(self) -> None:
        """No more events; subscribers finish once they have read everything."""
        self.closed = True
        self.visible = len(self.frames)
        for waiter in self._waiters:
            waiter.set()

    async def subscribe(self, after: int, heartbeat: float) -> AsyncGenerator[bytes, None]:
        """Yields every frame after sequence ``after``, then follows the run until it closes;
        a heartbeat comment after ``heartbeat`` seconds of silence."""
        cursor = max(0, after)
        wake = asyncio.Event()
        self._waiters.append(wake)
        loop = asyncio.get_running_loop()
        # One heartbeat timer per subscriber, moved only when it fires, not a timeout
        # around every wait: with thousands of open streams, scheduling and cancelling
        # a timer per frame was a quarter of the event loop's time (bench --streams).
        last_sent = loop.time()
        timer_from = last_sent  # the last_sent the timer was set from
        due = False

        def fire() -> None:
            nonlocal due
            due = True
            wake.set()

        timer = loop.call_at(last_sent + heartbeat, fire)
        try:
            while True:
                end = self.visible
                if cursor < end:
                    frames = self.frames
                    chunk = frames[cursor] if end == cursor + 1 else b"".join(frames[cursor:end])
                    cursor = end
                    last_sent = loop.time()
                    yield chunk
                    continue
                if self.closed:
                    return
                if due:
                    due = False
                    if last_sent == timer_from:  # nothing was sent since the timer was set
                        yield HEARTBEAT
                        last_sent = loop.time()
                    timer_from = last_sent
                    timer = loop.call_at(last_sent + heartbeat, fire)
                    continue
                wake.clear()
                await wake.wait()
        finally:
            timer.cancel()
            self._waiters.remove(wake)
