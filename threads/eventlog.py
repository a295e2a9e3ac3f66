"""The durable run event log, written in batches.

Appending is a tuple append on the hot path; a single writer task gathers what
arrived during ``flush_seconds`` (or up to ``batch`` events) and writes it with
one ``executemany``, so the log never costs a database round trip per event.
What one flush writes is stored as one frame (threads/logframes.py), not a row
per event. ``close`` writes what is left and returns when everything is durable.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from threads import fastsql, logframes
from threads.dbthread import sharing_the_gil
from threads.leases import RunTakenOver
from threads.models import EventFrame, Run

log = logging.getLogger(__name__)
# About half a minute of retries with backoff before a batch is given up.
WRITE_ATTEMPTS = 10


Rows = list[tuple[int, str, str]]  # (seq, type, payload JSON)
# The most events one frame holds.
FRAME_EVENTS = 2000
# How far a run's live stream may run ahead of its durable log (agui/stream.py holds back what
# goes further). A client can hold no id past the log's end plus this, so a dead run's log is
# ended after it (threads/healing.py): its closing events never reuse an id a client was shown.
UNLOGGED_AHEAD = 10_000


class EventLogWriter:
    """``after_write``, when given, is awaited with each batch once it is durable
    (the cross-process relay uses it, so a follower never sees an event that is
    not yet in the log).

    A batch is gathered for ``flush_seconds``; if it then holds fewer than ``frame_events``
    events (a run streaming at a model's pace), gathering goes on until it has them or until
    ``max_delay_seconds`` after it began. Each batch is a row of the log, and a row of two events
    cost the database more than the bytes its client was sent (bench/log_storage.py).

    ``takeovers``, when given, fences the writes: how often the run had been taken over when this
    process got it. A batch is written only while the run is still running with that count, checked
    in the write's own transaction; a process that stalled past its lease and wakes after another took
    the run over writes nothing more into the log the other continues (threads/takeover.py)."""

    def __init__(
        self,
        run_pk: uuid.UUID,
        *,
        flush_seconds: float,
        batch: int,
        max_delay_seconds: float | None = None,
        frame_events: int = 1,
        after_write: Callable[[Rows], Awaitable[None]] | None = None,
        takeovers: int | None = None,
    ) -> None:
        self.run_pk = run_pk
        self.takeovers = takeovers
        self.after_write = after_write
        self.flush_seconds = flush_seconds
        self.max_delay_seconds = max(flush_seconds, max_delay_seconds or flush_seconds)
        self.frame_events = frame_events
        self.batch = batch
        self._pending: Rows = []
        self._wake = asyncio.Event()
        self._hurried = asyncio.Event()  # write what is pending now: set by hurry() and by close()
        self._writing = False  # a chunk of this run's is with the group commit
        self._closed = False
        # A fresh context, like the run's: the writer must not use (and keep
        # alive) the thread-sensitive executor of the request that started it.
        self._task = asyncio.get_running_loop().create_task(
            self._writer(), name=f"eventlog-{run_pk}", context=contextvars.Context()
        )
        self.written = 0
        self.writes = 0  # INSERT batches, for tests and the benchmark
        self.durable = 0  # the highest seq in the log
        # Told the new ``durable`` after each write (the run's stream, agui/stream.py).
        self.on_durable: Callable[[int], None] | None = None

    def append(self, seq: int, type_: str, payload: str) -> None:
        self._pending.append((seq, type_, payload))
        pending = len(self._pending)
        if pending == 1 or pending == self.frame_events or pending >= self.batch:
            self._wake.set()

    def hurry(self) -> None:
        """What is pending is written now, not once its batch is gathered: a client waits on it
        (agui/stream.py shows an event that opens or closes a part once the log holds it)."""
        self._hurried.set()
        self._wake.set()
        if self._writing:
            _group_commit().hurry()  # the chunk ahead of it is written without gathering more

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._hurried.is_set() and len(self._pending) < self.batch:
                # Gather for a moment; a close or a hurry cuts the wait short.
                try:
                    async with asyncio.timeout(self.flush_seconds):
                        await self._hurried.wait()
                except TimeoutError:
                    pass
                await self._gather_a_frame()
            urgent = self._hurried.is_set()  # a client waits on it: it joins no gathering
            if not self._closed:
                self._hurried.clear()  # a hurry from now on is for what comes next
            chunk, self._pending = self._pending, []
            urgent = urgent or len(chunk) >= self.batch  # a fast run's full batch: nothing to wait for
            if chunk:
                await self._write(chunk, urgent)
            if self._pending:
                # What came during the write is gathered in turn: written at once, it made
                # frames of the few events a slow database's write took (PostgreSQL, paced runs).
                self._wake.set()
            elif self._closed:
                return

    async def _gather_a_frame(self) -> None:
        """A slow run's batch waits for ``frame_events`` events, a close, or the longest delay."""
        left = self.max_delay_seconds - self.flush_seconds
        if self._hurried.is_set() or left <= 0 or len(self._pending) >= self.frame_events:
            return
        self._wake.clear()  # append sets it when the batch reaches frame_events; close and hurry too
        try:
            async with asyncio.timeout(left):
                await self._wake.wait()
        except TimeoutError:
            pass
        self._wake.clear()

    async def _write(self, chunk: Rows, urgent: bool) -> None:
        delay = 0.1
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                self._writing = True
                try:
                    await _group_commit().write(self.run_pk, chunk, self.takeovers, urgent=urgent)
                finally:
                    self._writing = False
            except RunTakenOver:
                log.warning("run %s was taken over by another process: its log goes on there", self.run_pk)
                self._pending, self._closed, self.on_durable = [], True, None  # abandon(), from within
                return
            except IntegrityError:
                # The batch is atomic: a duplicate seq means an earlier attempt
                # committed before its connection failed.
                log.warning("event log batch for run %s was already written", self.run_pk)
            except Exception as exc:  # the database may be briefly locked or gone
                log.warning("event log write for run %s failed (attempt %d): %s", self.run_pk, attempt, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            self.written += len(chunk)
            self.writes += 1
            self.durable = max(self.durable, chunk[-1][0])
            if self.on_durable is not None:
                self.on_durable(self.durable)
            if self.after_write is not None:
                try:
                    await self.after_write(chunk)
                except Exception:
                    log.exception("relaying events of run %s failed", self.run_pk)
            return
        log.error("event log for run %s could not write %d events", self.run_pk, len(chunk))

    def abandon(self) -> None:
        """Writes nothing more: what is pending is dropped and the writer stops. For a run another
        process took over (threads/takeover.py): its log goes on there, and an event written here
        now would land in it, among the continuation's."""
        self._pending = []
        self._closed = True
        self._task.cancel()
        self.on_durable = None

    async def close(self) -> None:
        self._closed = True
        self.hurry()  # the run's end is held until its log is durable (agui/stream.py)
        try:
            await asyncio.shield(self._task)
        finally:
            # The stream's bound method: the stream holds this writer, so keeping it would make the
            # run a reference cycle, its frames held until the cyclic collector's next full pass.
            self.on_durable = None


class _GroupCommit:
    """The chunks every run's writer hands over within ``gather_seconds`` of each other, or while
    the database thread is busy, written together in one transaction. With a hundred runs
    streaming at once, each writer's chunk was a few rows, and a transaction per chunk kept the
    one database thread busy for most of the runs' time (bench/stream.py --concurrent, py-spy).
    At a model's pace the runs' chunks come one by one, spread over each half second: written as
    they came, 200 runs made about 400 transactions a second, and the hand-overs to the database
    thread and back cost the event loop more than the writes (bench/paced.py). An urgent chunk
    (an event a client waits to be shown, a run's end) is written at once, with what is gathered."""

    def __init__(self, gather_seconds: float) -> None:
        self.gather_seconds = gather_seconds
        self._queue: list[tuple[object, Rows, int | None, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None
        self._urgent = asyncio.Event()
        self.transactions = 0  # for tests and the benchmark

    async def write(self, run_pk: object, rows: Rows, takeovers: int | None = None, *, urgent: bool = True) -> None:
        """Returns once ``rows`` are committed; raises what writing them alone would have raised
        (RunTakenOver, with ``takeovers``, when the run is no longer this process's). Not
        ``urgent``: the rows may wait up to ``gather_seconds`` for other runs' to join them."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._queue.append((run_pk, rows, takeovers, done))
        if urgent:
            self._urgent.set()
        if self._task is None or self._task.done():
            # A fresh context, so the database work goes to asgiref's process-wide thread.
            self._task = loop.create_task(self._drain(), name="eventlog-group-commit", context=contextvars.Context())
        await done

    def hurry(self) -> None:
        """What is queued is written now, without waiting for more to gather."""
        self._urgent.set()

    async def _gather(self) -> None:
        """Until other runs' chunks have had ``gather_seconds`` to come, or an urgent one comes."""
        if self.gather_seconds <= 0 or self._urgent.is_set():
            return
        try:
            async with asyncio.timeout(self.gather_seconds):
                await self._urgent.wait()
        except TimeoutError:
            pass

    async def _drain(self) -> None:
        while self._queue:
            try:
                await self._gather()
            except BaseException:
                for *_, done in self._queue:
                    done.cancel()  # the loop is going away: so are the writers waiting here
                self._queue = []
                raise
            self._urgent.clear()
            queued, self._queue = self._queue, []
            self.transactions += 1
            errors: list[Exception | None]
            try:
                with sharing_the_gil():
                    errors = await sync_to_async(insert_event_chunks)(
                        [(run_pk, rows) for run_pk, rows, _, _ in queued],
                        fences={run_pk: takeovers for run_pk, _, takeovers, _ in queued if takeovers is not None},
                    )
            except Exception as exc:
                errors = [exc] * len(queued)
            except BaseException:
                for *_, done in queued:
                    done.cancel()  # the loop is going away: so are the writers waiting here
                raise
            for (*_, done), error in zip(queued, errors, strict=True):
                if done.done():
                    continue  # its writer was cancelled
                if error is None:
                    done.set_result(None)
                else:
                    done.set_exception(error)


_group_commits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _GroupCommit] = weakref.WeakKeyDictionary()


def _group_commit() -> _GroupCommit:
    loop = asyncio.get_running_loop()
    group = _group_commits.get(loop)
    if group is None:
        group = _group_commits[loop] = _GroupCommit(settings.EVENT_LOG_GROUP_SECONDS)
    return group


def insert_event_chunks(
    chunks: list[tuple[object, Rows]], *, fences: dict[object, int] | None = None
) -> list[Exception | None]:
    """Writes each run's chunk of rows; returns, per chunk, None once it is committed or the
    error it met. Several chunks go in one transaction, as one series of statements; if that
    fails, each is written in a transaction of its own, so one run's bad chunk (a duplicate, a
    run deleted meanwhile) fails as it would have alone and takes no other run's rows with it.
    ``fences``: runs whose chunk is written only while they are running with that many takeovers
    (``taken_over``); another's gets RunTakenOver and writes nothing.

    One series, not a statement and a savepoint per run: each statement lets go of the GIL and
    must take it back from the busy event loop, so a hundred runs' chunks written one by one
    kept the log seconds behind its runs (bench/stream.py --concurrent)."""
    fences = fences or {}
    if len(chunks) > 1:
        try:
            with transaction.atomic():
                lost = taken_over(fences)
                _insert([(run_pk, rows) for run_pk, rows in chunks if run_pk not in lost])
        except Exception:
            pass
        else:
            return [_taken_over_error(run_pk) if run_pk in lost else None for run_pk, _ in chunks]
    errors: list[Exception | None] = []
    for run_pk, rows in chunks:
        try:
            insert_events(run_pk, rows, takeovers=fences.get(run_pk))
        except Exception as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


def insert_events(run_pk: object, rows: Rows, *, takeovers: int | None = None) -> None:
    """Logs (seq, type, payload) rows of one run, with contiguous seqs, as one frame; with
    ``takeovers``, only while the run is still running with that many (else RunTakenOver)."""
    with transaction.atomic():
        if takeovers is not None and taken_over({run_pk: takeovers}):
            raise _taken_over_error(run_pk)
        _insert([(run_pk, rows)])


def _taken_over_error(run_pk: object) -> RunTakenOver:
    return RunTakenOver(f"run {run_pk} was taken over by another process")


def taken_over(fences: dict[object, int]) -> set[object]:
    """Of the runs in ``fences`` (run pk: how often it had been taken over when its writer got it),
    those no longer running with that count: another process took them over, or healed them, since.

    Inside the log write's transaction, and on PostgreSQL under a KEY SHARE lock of each run's row,
    which a takeover's FOR UPDATE waits on (threads/takeover.py ``run_take_over``, threads/healing.py):
    a takeover either comes before the check, which then sees it, or waits for the write's commit and
    reads the log with the batch in it. Never a batch committed behind a takeover's back, in the gap
    its continuation leaves. SQLite's transactions are IMMEDIATE: one writer at a time, so the check
    and the insert are one step to every other writer."""
    if not fences:
        return set()
    keys = {fastsql.db_value(Run, "id", run_pk): run_pk for run_pk in fences}
    table = connection.ops.quote_name(Run._meta.db_table)
    id_, count, status = (connection.ops.quote_name(name) for name in ("id", "takeovers", "status"))
    lock = f" ORDER BY {id_} FOR KEY SHARE" if connection.vendor == "postgresql" else ""
    marks = ", ".join(["%s"] * len(keys))
    rows = fastsql.execute((f"SELECT {id_}, {count}, {status} FROM {table} WHERE {id_} IN ({marks}){lock}", list(keys)))
    ours = {
        keys[key]
        for key, now, state in rows
        if key in keys and now == fences[keys[key]] and state == Run.Status.RUNNING
    }
    return set(fences) - ours


def _insert(chunks: list[tuple[object, Rows]]) -> None:
    now = fastsql.db_value(EventFrame, "created_at", timezone.now())
    values: list[tuple[object, int, int, bytes, object]] = []
    for run_pk, rows in chunks:
        if not rows:
            continue
        first, last = rows[0][0], rows[-1][0]
        if last - first + 1 != len(rows) or any(row[0] != seq for seq, row in enumerate(rows, first)):
            raise ValueError(f"a frame's events must have contiguous seqs; got {first}..{last} in {len(rows)}")
        run_value = fastsql.db_value(EventFrame, "run", run_pk)
        # A writer that fell behind hands over more at once: frames stay small enough that reading
        # from a seq inside one decodes little more than it needs.
        for start in range(0, len(rows), FRAME_EVENTS):
            part = rows[start : start + FRAME_EVENTS]
            body = logframes.encode([(type_, payload) for _, type_, payload in part])
            values.append((run_value, part[0][0], part[-1][0], body, now))
    fastsql.insert_rows(EventFrame, ("run", "first_seq", "last_seq", "body", "created_at"), values)
