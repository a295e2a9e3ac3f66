"""A live run's event stream: encoding, the durable log, and fan-out to subscribers.

``publish`` is the per-event hot path: encode once, keep the SSE frame for
replay, hand the payload to the batched log, wake subscribers. Subscribers read
from a cursor into the frame list and take everything that arrived since their
last read as one chunk, so a fast producer never waits on a slow reader and a
reader never costs a write per event.
"""

from __future__ import annotations

import asyncio
import types
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Any, Protocol

import orjson

from threads.eventlog import UNLOGGED_AHEAD, EventLogWriter
from vocabulary import agui as ev

HEARTBEAT = b": ping\n\n"
# The events that open or close a part (a message, a tool call, reasoning, a step, a sub-agent). A
# logged run's subscribers see one only once the log holds it, and the log is hurried to write it: a
# run taken over closes what its log left open (threads/takeover.py), so a client shown a close the
# log never kept would be sent it twice, and one shown an opening the log never kept would never be
# sent its close.
HELD_TYPES = ev.OPENING_AND_CLOSING_RUNS


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


class _Waker(Protocol):
    def set(self) -> None: ...


class RunStream:
    """The frames of one run. A logged run's terminal event is held back from
    subscribers until ``close`` (called once the run is durable): a client that
    has seen RUN_FINISHED or RUN_ERROR can rely on the run and all its events
    being recorded, in whichever process it asks next. Nor do subscribers see
    further than ``UNLOGGED_AHEAD`` events past the durable log, so a process that
    dies leaves no client holding an id its log's healed end would reuse.

    ``after``: the stream continues a log that holds events up to there (a run taken over from a
    dead process, threads/takeover.py): its first event is ``after + 1``, and a subscriber from an
    earlier id reads the log instead (agui/views.py)."""

    def __init__(self, log: EventLogWriter | None, *, after: int = 0) -> None:
        self.frames: list[bytes] = []
        self.continues_after = after
        self.visible = 0  # how many frames subscribers may read
        self.log = log
        self.closed = False
        self.handed_over = False  # its run goes on in another process: nothing more is published here
        self._held = 0  # 1 once a logged run's terminal frame is published: it waits for close
        self._holds: deque[int] = deque()  # seqs of HELD_TYPES events not yet in the log, oldest first
        self._waiters: list[_Waker] = []  # told of each frame they may read, and of the close

    @property
    def last_seq(self) -> int:
        return self.continues_after + len(self.frames)

    @property
    def subscribers(self) -> int:
        return len(self._waiters)

    def publish(self, event: dict[str, Any]) -> None:
        if self.handed_over:
            return
        payload = encode_event(event)
        frames = self.frames
        seq = self.continues_after + len(frames) + 1
        frames.append(b"id: %d\ndata: %s\n\n" % (seq, payload))  # sse_frame, inlined on the per-event path
        log = self.log
        if log is not None:
            log.append(seq, event["type"], payload.decode())
            kind = event["type"]
            if kind in ev.TERMINAL_TYPES:
                self._held = 1
                return
            if kind in HELD_TYPES and seq > log.durable:
                self._holds.append(seq)
                log.hurry()
            if self._holds or seq > log.durable + UNLOGGED_AHEAD:
                return  # let out when the log catches up (_log_durable)
        self.visible = len(frames)
        for waiter in self._waiters:
            waiter.set()

    def _log_durable(self, durable: int) -> None:
        """The log holds every event up to ``durable``: what waited on it is let out."""
        holds = self._holds
        while holds and holds[0] <= durable:
            holds.popleft()
        visible = min(len(self.frames) - self._held, durable - self.continues_after + UNLOGGED_AHEAD)
        if holds:
            visible = min(visible, holds[0] - 1 - self.continues_after)  # up to the held event, not it
        if visible > self.visible and not self.closed:
            self.visible = visible
            for waiter in self._waiters:
                waiter.set()

    def attach_log(self, log: EventLogWriter) -> None:
        """Starts logging; what was published before (RUN_STARTED, sent ahead of the
        database work) goes into the log first, so the log is complete."""
        for seq, frame in enumerate(self.frames, self.continues_after + 1):
            payload = frame.split(b"data: ", 1)[1][:-2]
            log.append(seq, orjson.loads(payload)["type"], payload.decode())
        log.durable = max(log.durable, self.continues_after)  # the log it continues holds everything up to there
        log.on_durable = self._log_durable
        self.log = log

    def hand_over(self) -> None:
        """The run stops here to go on in another process (a shutdown): what was published is logged
        and sent, nothing after (no terminal event: its subscribers end without one, and a client
        reattaches to follow the run where it goes on)."""
        self.handed_over = True

    def end_moved(self) -> None:
        """The run was taken over by another process while this one still streamed it: its
        subscribers end where they are, with no terminal event (a client reattaches and follows the
        run where it goes on). Nothing held back is let out: the log another process continues never
        got it, and a client shown it would hold a part nobody closes."""
        self.handed_over = True
        self.closed = True
        for waiter in self._waiters:
            waiter.set()

    def drop_log(self) -> None:
        """The run was taken over by another process: nothing more goes to its log from here
        (this stream's own subscribers still get what it publishes)."""
        if self.log is not None:
            self.log.abandon()
            self.log = None

    def replace_terminal(self, event: dict[str, Any]) -> None:
        """The run could not be recorded: its held-back terminal event is not let out, ``event``
        (a RUN_ERROR) ends the stream in its place. A client is never told "finished" of a run
        that is not durable."""
        if self.frames and self.visible < len(self.frames):
            payload = encode_event(event)
            self.frames[-1] = sse_frame(self.last_seq, payload)

    def close(self) -> None:
        """No more events; subscribers finish once they have read everything."""
        self.closed = True
        self.visible = len(self.frames)
        for waiter in self._waiters:
            waiter.set()

    def chunk(self, start: int, end: int) -> bytes:
        """Frames ``start`` to ``end`` (list positions, ``end`` excluded) as one piece for the wire."""
        frames = self.frames
        return frames[start] if end == start + 1 else b"".join(frames[start:end])

    def follow(self, after: int, heartbeat: float) -> LiveFrames:
        """What an SSE response sends of this run: ``subscribe``'s frames, written by ``LiveFrames.send_to``
        as they are published rather than by a task woken for each."""
        return LiveFrames(self, after, heartbeat)

    async def subscribe(self, after: int, heartbeat: float) -> AsyncGenerator[bytes, None]:
        """Yields every frame after sequence ``after``, then follows the run until it closes;
        a heartbeat comment after ``heartbeat`` seconds of silence."""
        cursor = max(0, after - self.continues_after)
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
                    chunk = self.chunk(cursor, end)
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


Send = Callable[[dict[str, Any]], Awaitable[None]]


class LiveFrames:
    """The frames of a live run after ``after`` for one client, then the run as it goes on, with a
    heartbeat after ``heartbeat`` seconds of silence. Iterated, they are ``RunStream.subscribe``'s;
    the AG-UI handler has them written by ``send_to`` instead (agui/asgi.py).

    Once sent they hold nothing of the run: a response can outlive its request in a reference cycle
    (Django's own handler leaves one behind every request; agui/acyclic.py AcyclicHandler does not),
    and the run's frames, 340 KiB for 2,000 tokens, must not wait for the cyclic collector with it."""

    def __init__(self, stream: RunStream, after: int, heartbeat: float) -> None:
        self._stream: RunStream | None = stream
        self.after = after
        self.heartbeat = heartbeat
        self._iterated: AsyncGenerator[bytes, None] | None = None

    def __aiter__(self) -> LiveFrames:
        return self  # the generator is made when first read: Django asks for the iterator at once

    async def __anext__(self) -> bytes:
        if self._iterated is None:
            self._iterated = self._taken().subscribe(self.after, self.heartbeat)
        return await anext(self._iterated)

    async def aclose(self) -> None:
        if self._iterated is not None:
            await self._iterated.aclose()

    async def send_to(self, send: Send) -> None:
        """Sends every frame as an ASGI body message, until the run's stream closes."""
        stream = self._taken()
        await _Writer(stream, max(0, self.after - stream.continues_after), self.heartbeat, send).run()

    def _taken(self) -> RunStream:
        stream, self._stream = self._stream, None
        if stream is None:
            raise RuntimeError("a live run's frames are sent once")
        return stream


class _Writer:
    """Writes a run's frames to one client in the event loop's turn after they are published.

    A subscriber of ``subscribe`` is a task that waits on an event: each frame woke it, and the
    task went from the event loop down through the ASGI server's, Django's and the handler's
    coroutines to the generator and back, for every token of every stream. With 500 replies at a
    model's pace that was a fifth of the event loop's time (bench/stream.py --operators, py-spy),
    and the loop's being busy is what made the admin, the API and /agui/info wait (issue #27 item
    5). Here ``RunStream`` calls ``set``, which schedules one ``_write`` for what the current turn
    publishes (so a burst of events is still one write), and ``_write`` sends it at once: the
    server's send completes without suspending unless the client is slow to read.

    The task (``run``) does what cannot be done there: it sends what was published before it
    caught up, the heartbeats, and a send that had to wait for the client (it goes on with it, and
    nothing is written meanwhile, so frames keep their order); and it ends the stream."""

    def __init__(self, stream: RunStream, cursor: int, heartbeat: float, send: Send) -> None:
        self.stream = stream
        self.cursor = cursor
        self.heartbeat = heartbeat
        self.send = send
        self.loop = asyncio.get_running_loop()
        self.attention = asyncio.Event()  # the task has something to do
        self.task_writes = True  # while the task writes (or has ended) nothing is written from set
        self.write_due = False
        self.waiting_send: tuple[Generator[Any, Any, None], Any] | None = None
        self.failure: BaseException | None = None
        self.last_sent = self.loop.time()

    def set(self) -> None:
        if self.task_writes or self.stream.closed:
            self.attention.set()
        elif not self.write_due:
            self.write_due = True
            self.loop.call_soon(self._write)

    def _write(self) -> None:
        self.write_due = False
        stream, cursor = self.stream, self.cursor
        end = stream.visible
        if self.task_writes or cursor >= end:
            return
        chunk = stream.chunk(cursor, end)
        self.cursor = end
        sending = self.send({"type": "http.response.body", "body": chunk, "more_body": True}).__await__()
        try:
            blocked_on = sending.send(None)
        except StopIteration:
            self.last_sent = self.loop.time()
            return
        except BaseException as exc:  # the task raises it, as a failed send of its own would be
            self.failure = exc
        else:
            self.waiting_send = (sending, blocked_on)
        self.task_writes = True
        self.attention.set()

    async def run(self) -> None:
        stream, loop, heartbeat = self.stream, self.loop, self.heartbeat
        stream._waiters.append(self)
        due = False

        def fire() -> None:
            nonlocal due
            due = True
            self.attention.set()

        timer_from = self.last_sent  # the last_sent the heartbeat timer was set from
        timer = loop.call_at(timer_from + heartbeat, fire)
        try:
            while True:
                if self.failure is not None:
                    raise self.failure
                if self.waiting_send is not None:
                    sending, blocked_on = self.waiting_send
                    self.waiting_send = None
                    await _going_on(sending, blocked_on)
                    self.last_sent = loop.time()
                end = stream.visible
                if self.cursor < end:
                    chunk = stream.chunk(self.cursor, end)
                    self.cursor = end
                    await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
                    self.last_sent = loop.time()
                    continue
                if stream.closed:
                    return
                if due:
                    due = False
                    if self.last_sent == timer_from:  # nothing was sent since the timer was set
                        await self.send({"type": "http.response.body", "body": HEARTBEAT, "more_body": True})
                        self.last_sent = loop.time()
                    timer_from = self.last_sent
                    timer = loop.call_at(timer_from + heartbeat, fire)
                    continue
                self.attention.clear()
                self.task_writes = False
                try:
                    await self.attention.wait()
                finally:
                    self.task_writes = True
        finally:
            timer.cancel()
            stream._waiters.remove(self)
            if self.waiting_send is not None:
                self.waiting_send[0].close()  # a send begun in _write that the task never went on with


@types.coroutine
def _going_on(steps: Generator[Any, Any, None], blocked_on: Any) -> Generator[Any, Any, None]:
    """Awaits what ``steps`` (an awaitable's ``__await__``) goes on with: it was started outside any
    task and is suspended on ``blocked_on`` (a future). The awaiting task waits on that future and
    resumes it, as it would have had it been awaited from the start."""
    while True:
        try:
            sent = yield blocked_on
        except BaseException as exc:
            try:
                blocked_on = steps.throw(exc)
            except StopIteration:
                return
        else:
            try:
                blocked_on = steps.send(sent)
            except StopIteration:
                return
