"""The shared database thread gets on with its work while the event loop is busy."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from django.db import connection

from threads.dbthread import _shares, on_db_thread


def _many_small_queries(count: int) -> None:
    # Each query lets go of the GIL in SQLite and must take it back from the busy loop.
    for _ in range(count):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")


@pytest.mark.django_db(transaction=True)
async def test_work_on_the_database_thread_finishes_while_the_loop_streams():
    done = asyncio.Event()
    turns = 0

    async def streaming() -> None:
        # Like a run streaming tokens: Python work, and a turn of the loop every so often,
        # until the database work is done or 30 s have passed.
        nonlocal turns
        deadline = time.monotonic() + 30
        while not done.is_set() and time.monotonic() < deadline:
            sum(range(2000))
            turns += 1
            await asyncio.sleep(0)

    busy = asyncio.create_task(streaming())
    await asyncio.sleep(0.05)
    started, turns_before = time.monotonic(), turns
    await on_db_thread(_many_small_queries, count=3000)
    took, turns_meanwhile = time.monotonic() - started, turns - turns_before
    still_busy = not busy.done()
    done.set()
    await busy
    # Without the loop standing aside (threads/dbthread.py, _GilShare) each query waited for
    # the GIL until the loop happened to lose a race for it: 3,000 queries took 9 s, and
    # with it 0.3 s.
    assert took < 5, f"the database work took {took:.1f}s beside the busy loop"
    # The loop was busy all along (the faster the work, the fewer its turns meanwhile).
    assert still_busy and turns_meanwhile >= 100, turns_meanwhile


def test_the_share_leaves_no_timer_and_no_hold_on_the_loop_once_its_work_is_done():
    # The shares are kept per loop, weakly: once the database work is over, nothing of the
    # share may still hold the loop (a pending timer does, through its arguments).
    async def some_work() -> None:
        await on_db_thread(lambda: None)
        await on_db_thread(lambda: None)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(some_work())
        share = _shares[loop]
        assert share.in_flight == 0
        assert share.timer is None
        assert not any(referrer is share for referrer in gc.get_referrers(loop))
    finally:
        loop.close()
