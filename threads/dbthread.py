"""Database work of requests and runs, on one long-lived thread with a persistent connection.

Django gives each request a fresh thread for its sync work, so every request
would open a new database connection (0.4 ms on SQLite, more over a network)
before its first byte. The AG-UI path instead runs its ORM calls on asgiref's
process-wide thread, the one runs already use, whose connection stays open.

This thread must also get the GIL from the event loop while it streams, and the loop from
it: see _GilShare and tune_switch_interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection, transaction

T = TypeVar("T")


def _drop_a_failed_connection() -> None:
    # What Django's close_old_connections does per request: drop a connection
    # that failed, so a database restart costs one error, not every request after it.
    if connection.connection is not None and connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
        connection.errors_occurred = False


def _checked[T](func: Callable[..., T], kwargs: dict[str, Any]) -> T:
    _drop_a_failed_connection()
    return func(**kwargs)


async def on_db_thread[T](func: Callable[..., T], /, **kwargs: Any) -> T:
    """Runs ``func(**kwargs)`` on the shared database thread and returns its result."""
    call = sync_to_async(_checked, thread_sensitive=True)
    # An empty context, so asgiref picks its process-wide thread rather than
    # the request's own thread-sensitive executor.
    with sharing_the_gil():
        return await asyncio.get_running_loop().create_task(call(func, kwargs), context=contextvars.Context())


_lease_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="threadline-leases")


async def on_lease_thread[T](func: Callable[..., T], /, **kwargs: Any) -> T:
    """Runs ``func(**kwargs)`` on a thread of its own, with a connection of its own: for the renewals
    of this process's leases, which must not wait behind the database thread's queue. A process taking
    over a dead one's runs, or starting a hundred, kept that thread busy for seconds, its renewals
    waited there, and its runs' leases lapsed: another process took them over as though it had died."""
    with sharing_the_gil():
        return await asyncio.get_running_loop().run_in_executor(
            _lease_thread, functools.partial(_checked, func, kwargs)
        )


# While database work is in flight the event loop stands aside for NAP seconds every EVERY.
EVERY = 0.001
NAP = 0.00005


class _GilShare:
    """Gives the GIL to the database thread while it has work, a moment at a time.

    That thread lets go of the GIL at each SQLite call and must then take it back from the
    event loop. CPython hands it over only when the waiter has waited a whole switch interval
    with no switch meanwhile, and a busy loop lets go of the GIL at every poll of its sockets
    and takes it straight back: that counts as a switch, so the waiter never asked and waited
    on. Beside one run streaming 200,000 tokens the database thread could not take the GIL
    for the whole reply: its log was written after the run had streamed, all of it held in
    memory until then, and the run's last event waited for it. A real sleep is what lets the
    waiter in (bench/stream.py --growth: peak RSS of that reply 176 -> 121 MiB, scripted)."""

    def __init__(self) -> None:
        self.in_flight = 0
        # The loop is held only by the pending timer, cancelled once nothing is in flight:
        # _shares is keyed weakly by the loop, and must not keep it alive.
        self.timer: asyncio.TimerHandle | None = None

    def enter(self, loop: asyncio.AbstractEventLoop) -> None:
        self.in_flight += 1
        if self.timer is None:
            self.timer = loop.call_later(EVERY, self._nap, loop)

    def exit(self) -> None:
        self.in_flight -= 1
        if not self.in_flight and self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _nap(self, loop: asyncio.AbstractEventLoop) -> None:
        time.sleep(NAP)
        self.timer = loop.call_later(EVERY, self._nap, loop)


_shares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _GilShare] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def sharing_the_gil() -> Iterator[None]:
    """Around an await of work on the database thread (see _GilShare)."""
    loop = asyncio.get_running_loop()
    share = _shares.get(loop)
    if share is None:
        share = _shares[loop] = _GilShare()
    share.enter(loop)
    try:
        yield
    finally:
        share.exit()


# How long a thread keeps the GIL while another waits for it: 1 ms in this server, not 5 ms.
SWITCH_INTERVAL = 0.001


def tune_switch_interval() -> None:
    """Sets SWITCH_INTERVAL for the whole process; call once, when the application is imported.

    While the database thread runs Python (the ORM work of runs starting and finishing, the
    rows of a batch of the log) it holds the GIL, and the event loop, wanting it back, waits:
    with a hundred runs starting at once the loop's thread sat in that wait for 10-25% of the
    first half second (its wchan, sampled from /proc). At CPython's 5 ms a wait can last 5 ms;
    at 1 ms the loop gets the GIL back sooner. Three A/B runs alternating rounds of a 1 ms and
    a 5 ms server (bench/stream.py --concurrent 100x2000) gave the 1 ms one 4-8% more events/s,
    on the SDK and the scripted paths alike."""
    sys.setswitchinterval(SWITCH_INTERVAL)


class _SharedCommits:
    """The writes that callers hand over while the database thread is busy, done together in one
    transaction, so they cost one commit, not one each.

    On PostgreSQL a commit waits for the write-ahead log to reach the disk (about 3 ms on these
    machines), and the process has one database thread: a hundred runs at once, each opening,
    committing its session and finishing in a transaction of its own, queued hundreds of those
    waits one after another, and the runs' first bytes and last events waited on them
    (bench/stream.py --concurrent on PostgreSQL, py-spy: psycopg's Connection.wait first).

    A write that fails in the group is done again alone once the group has ended, as it would have
    been done without the group: with its own transaction and its own retries of a lost race
    (threads/locking.py). A write whose transaction.atomic makes a savepoint in the group fails
    alone: its savepoint is rolled back and the others are committed. One that makes none (the
    runs' own writes: a savepoint and its release were two round trips of their five) takes the
    group down with it: the group is rolled back and every write of it is done again alone, as
    they all are when the group's commit fails. Failures are rare (a lost race, a client's error
    such as a run on another agent's thread), and a group done again alone costs what its writes
    cost without the group."""

    def __init__(self) -> None:
        self._queue: list[tuple[Callable[..., Any], dict[str, Any], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None

    async def run(self, func: Callable[..., T], kwargs: dict[str, Any]) -> T:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._queue.append((func, kwargs, done))
        if self._task is None or self._task.done():
            # A fresh context, so the database work goes to asgiref's process-wide thread.
            self._task = loop.create_task(self._drain(), name="db-shared-commits", context=contextvars.Context())
        return await done

    async def _drain(self) -> None:
        call = sync_to_async(_together, thread_sensitive=True)
        while self._queue:
            queued, self._queue = self._queue, []
            try:
                with sharing_the_gil():
                    outcomes = await call([(func, kwargs) for func, kwargs, _ in queued])
            except BaseException:
                for *_, done in queued:
                    done.cancel()  # the loop is going away: so are the callers waiting here
                raise
            for (*_, done), (ok, value) in zip(queued, outcomes, strict=True):
                if done.done():
                    continue  # its caller was cancelled
                if ok:
                    done.set_result(value)
                else:
                    done.set_exception(value)


class _Group(threading.local):
    job_starting = False  # a shared commit has begun a job, which has not entered a shared_write yet


_group = _Group()


def shared_write[**P, R](write: Callable[P, R]) -> Callable[P, R]:
    """``transaction.atomic`` for a write that is done in shared commits (``on_db_thread_shared``):
    as the job of a group it makes no savepoint, whose statement and release were two round trips
    to PostgreSQL of a commit's three (the group does what it would: a failure rolls the group back
    and every write of it is done again alone, see _together). Anywhere else, in another caller's
    transaction too, it is ``transaction.atomic`` with its savepoint."""

    @functools.wraps(write)
    def in_a_transaction(*args: P.args, **kwargs: P.kwargs) -> R:
        as_a_job, _group.job_starting = _group.job_starting, False  # its own writes within are not the job
        with transaction.atomic(savepoint=not as_a_job):
            return write(*args, **kwargs)

    return in_a_transaction


def _together(jobs: list[tuple[Callable[..., Any], dict[str, Any]]]) -> list[tuple[bool, Any]]:
    """(True, result) or (False, exception) of each job, in order."""
    if len(jobs) == 1:
        return [_alone(*jobs[0])]
    outcomes: list[tuple[bool, Any] | None] = []
    try:
        _drop_a_failed_connection()
        with transaction.atomic():
            for func, kwargs in jobs:
                # No savepoint of the group's around a job, and none of the job's own if it is a
                # shared_write: their two statements were two more round trips to PostgreSQL each.
                _group.job_starting = True
                try:
                    outcomes.append((True, func(**kwargs)))
                except Exception:
                    if connection.needs_rollback:
                        # The job had no savepoint to roll back to: the group's transaction is
                        # lost, and every job of it is done again alone, below.
                        raise
                    outcomes.append(None)  # its own savepoint rolled back: done again alone, below
                finally:
                    _group.job_starting = False
    except Exception:
        return [_alone(func, kwargs) for func, kwargs in jobs]
    return [outcome or _alone(*job) for outcome, job in zip(outcomes, jobs, strict=True)]


def _alone(func: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[bool, Any]:
    try:
        return True, _checked(func, kwargs)
    except Exception as exc:
        return False, exc


_shared_commits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _SharedCommits] = weakref.WeakKeyDictionary()


async def on_db_thread_shared[T](func: Callable[..., T], /, **kwargs: Any) -> T:
    """``on_db_thread`` for a write that makes its own transaction (``transaction.atomic``), done
    together with the other such writes waiting for the database thread, in one commit
    (_SharedCommits). Returns once it is committed; raises what it would have raised alone."""
    loop = asyncio.get_running_loop()
    shared = _shared_commits.get(loop)
    if shared is None:
        shared = _shared_commits[loop] = _SharedCommits()
    return await shared.run(func, kwargs)
