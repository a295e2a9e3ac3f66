"""The shared database thread gets on with its work while the event loop is busy."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import AsyncIterator

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction

from threads.dbthread import _shares, on_db_thread, on_db_thread_shared, shared_write


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


def _write(*, name: str, log: list[str], fail: str = "") -> str:
    with transaction.atomic():
        Group.objects.create(name=name)
        log.append(f"wrote {name}")
        transaction.on_commit(lambda: log.append(f"committed {name}"))
        if fail == "always" or (fail == "in a group" and connection.savepoint_ids):
            raise ValueError(f"{name} failed")
    return name


@contextlib.asynccontextmanager
async def _database_thread_busy() -> AsyncIterator[None]:
    """Keeps the database thread busy while the block queues writes behind it; once they are all
    queued, lets it go and waits for it to be done."""
    busy, release = threading.Event(), threading.Event()

    def hold() -> None:
        busy.set()
        release.wait(10)

    holding = asyncio.create_task(on_db_thread_shared(hold))
    await asyncio.to_thread(busy.wait, 10)
    try:
        yield
        await asyncio.sleep(0.05)  # everything queued behind the one in hand
    finally:
        release.set()
        await holding


@pytest.mark.django_db(transaction=True)
async def test_writes_that_wait_for_the_database_thread_share_one_commit():
    log: list[str] = []
    async with _database_thread_busy():
        writes = [asyncio.create_task(on_db_thread_shared(_write, name=f"g{i}", log=log)) for i in range(3)]
    assert await asyncio.gather(*writes) == ["g0", "g1", "g2"]
    # One commit for the three: each was written before any was committed.
    assert log == ["wrote g0", "wrote g1", "wrote g2", "committed g0", "committed g1", "committed g2"]
    names = await on_db_thread(lambda: sorted(Group.objects.values_list("name", flat=True)))
    assert names == ["g0", "g1", "g2"]


@pytest.mark.django_db(transaction=True)
async def test_a_write_that_fails_in_the_group_fails_alone_and_one_that_fails_only_there_is_done_again():
    log: list[str] = []
    async with _database_thread_busy():
        kept = asyncio.create_task(on_db_thread_shared(_write, name="kept", log=log))
        broken = asyncio.create_task(on_db_thread_shared(_write, name="broken", log=log, fail="always"))
        # Fails inside the group only, as a lost race does: done again alone, it succeeds.
        again = asyncio.create_task(on_db_thread_shared(_write, name="again", log=log, fail="in a group"))
    assert await kept == "kept"
    with pytest.raises(ValueError, match="broken failed"):
        await broken
    assert await again == "again"
    names = await on_db_thread(lambda: sorted(Group.objects.values_list("name", flat=True)))
    assert names == ["again", "kept"]  # nothing of the broken one; the others kept
    assert log.count("committed again") == 1 and "committed broken" not in log


@shared_write  # as the runs' own writes are (threads/services: run_open, session_commit, run_finish)
def _write_without_savepoint(*, name: str, log: list[str], fail: bool = False) -> str:
    Group.objects.create(name=name)
    log.append(f"wrote {name}")
    transaction.on_commit(lambda: log.append(f"committed {name}"))
    if fail:
        raise ValueError(f"{name} failed")
    return name


@pytest.mark.django_db(transaction=True)
async def test_a_write_without_a_savepoint_that_fails_takes_its_group_down_and_the_others_are_done_again_alone():
    log: list[str] = []
    async with _database_thread_busy():
        before = asyncio.create_task(on_db_thread_shared(_write_without_savepoint, name="before", log=log))
        broken = asyncio.create_task(on_db_thread_shared(_write_without_savepoint, name="broken", log=log, fail=True))
        after = asyncio.create_task(on_db_thread_shared(_write_without_savepoint, name="after", log=log))
    assert await before == "before"
    with pytest.raises(ValueError, match="broken failed"):
        await broken
    assert await after == "after"
    names = await on_db_thread(lambda: sorted(Group.objects.values_list("name", flat=True)))
    assert names == ["after", "before"]
    # The group was rolled back when the broken write failed (nothing of it was committed), and
    # each write was then done alone, in its own transaction.
    assert log == [
        "wrote before",
        "wrote broken",
        "wrote before",
        "committed before",
        "wrote broken",
        "wrote after",
        "committed after",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_shared_write_in_another_callers_transaction_fails_alone():
    log: list[str] = []
    with transaction.atomic():
        Group.objects.create(name="the caller's")
        with pytest.raises(ValueError, match="broken failed"):
            _write_without_savepoint(name="broken", log=log, fail=True)
        Group.objects.create(name="the caller's, after")  # its transaction goes on
    assert sorted(Group.objects.values_list("name", flat=True)) == ["the caller's", "the caller's, after"]
