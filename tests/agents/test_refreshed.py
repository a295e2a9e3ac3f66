"""agents/refreshed.py: a value kept for its TTL, then answered as it is while it is read again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agents.refreshed import Refreshed


class Source:
    """What the cache reads: a value that changes, the reads counted, each read held until let go."""

    def __init__(self) -> None:
        self.value = "first"
        self.reads = 0
        self.fail = False
        self.gate = asyncio.Event()
        self.gate.set()

    async def read(self) -> str:
        self.reads += 1
        value = self.value  # what the database held when the read began
        await self.gate.wait()
        if self.fail:
            raise RuntimeError("the database is gone")
        return value


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_first_call_waits_for_a_read_and_later_ones_within_the_ttl_read_nothing() -> None:
    source, clock = Source(), Clock()
    kept = Refreshed(source.read, ttl=2.0, name="the test value", clock=clock)
    assert await kept.current() == "first"
    source.value = "second"
    clock.now += 1.9
    assert await kept.current() == "first"
    assert source.reads == 1


async def test_past_the_ttl_the_value_is_answered_at_once_and_read_again_for_the_next_caller() -> None:
    source, clock = Source(), Clock()
    kept = Refreshed(source.read, ttl=2.0, name="the test value", clock=clock)
    await kept.current()
    source.value = "second"
    source.gate.clear()  # the re-read cannot finish: the caller must not be waiting for it
    clock.now += 2.5
    assert await kept.current() == "first"
    await _settled()
    assert await kept.current() == "first"  # the re-read in flight is not begun twice
    await _settled()
    assert source.reads == 2
    source.gate.set()
    await _settled()
    assert await kept.current() == "second"
    assert source.reads == 2


async def test_a_value_older_than_twice_the_ttl_is_waited_for() -> None:
    source, clock = Source(), Clock()
    kept = Refreshed(source.read, ttl=2.0, name="the test value", clock=clock)
    await kept.current()
    source.value = "second"
    clock.now += 4.0
    assert await kept.current() == "second"


async def test_a_burst_of_callers_that_must_wait_share_one_read() -> None:
    source, clock = Source(), Clock()
    kept = Refreshed(source.read, ttl=2.0, name="the test value", clock=clock)
    assert await asyncio.gather(*(kept.current() for _ in range(50))) == ["first"] * 50
    assert source.reads == 1


async def test_after_forget_the_next_caller_waits_for_a_read_begun_after_the_change() -> None:
    source, clock = Source(), Clock()
    kept = Refreshed(source.read, ttl=3600, name="the test value", clock=clock)
    await kept.current()
    clock.now += 4000  # stale: the next call waits for a read
    source.gate.clear()
    before = asyncio.ensure_future(kept.current())
    await _settled()  # its read has begun, and read "first"
    source.value = "second"
    kept.forget()  # what a signal does on a change in this process
    source.gate.set()
    assert await before == "first"  # that caller gets what its read found
    assert await kept.current() == "second"  # the read begun before the change was not kept
    assert source.reads == 3


async def test_a_failed_re_read_keeps_the_value_and_the_next_caller_past_the_ttl_tries_again(caplog) -> None:
    source, clock = Source(), Clock()
    kept = Refreshed(source.read, ttl=2.0, name="the test value", clock=clock)
    await kept.current()
    source.value, source.fail = "second", True
    clock.now += 2.5
    with caplog.at_level(logging.ERROR, logger="agents.refreshed"):
        assert await kept.current() == "first"
        await _settled()
    assert "could not read the test value again" in caplog.text
    source.fail = False
    assert await kept.current() == "first"
    await _settled()
    assert await kept.current() == "second"
    assert source.reads == 3


async def test_a_caller_that_must_wait_gets_the_error_of_its_read() -> None:
    source = Source()
    source.fail = True
    kept = Refreshed(source.read, ttl=2.0, name="the test value")
    with pytest.raises(RuntimeError, match="the database is gone"):
        await kept.current()
    source.fail = False
    assert await kept.current() == "first"


async def test_kept_fresh_the_value_is_read_again_as_it_ages_with_no_caller() -> None:
    source = Source()
    kept = Refreshed(source.read, ttl=0.05, name="the test value")
    keeper = asyncio.create_task(kept.keep_fresh())
    try:
        await asyncio.sleep(0.02)
        assert kept.value == "first"  # the keeper's first read: there was none yet
        source.value = "second"  # changed where no signal reaches (another process's admin)
        await asyncio.sleep(0.4)
        assert kept.value == "second"
        assert 3 <= source.reads <= 12  # about one read a TTL, not a busy loop
    finally:
        keeper.cancel()


async def test_kept_fresh_a_caller_after_a_quiet_spell_does_not_wait_for_a_read() -> None:
    """Without the keeper, a value older than twice the TTL is waited for (the test above it)."""
    source = Source()
    kept = Refreshed(source.read, ttl=0.5, name="the test value")
    assert await kept.current() == "first"
    keeper = asyncio.create_task(kept.keep_fresh())
    try:
        await asyncio.sleep(1.6)  # past twice the TTL with no caller
        source.gate.clear()  # a read now could not finish
        assert await asyncio.wait_for(kept.current(), timeout=0.2) == "first"
    finally:
        keeper.cancel()
        source.gate.set()


async def test_kept_fresh_a_failed_read_is_tried_again_a_ttl_later(caplog) -> None:
    source = Source()
    source.fail = True
    kept = Refreshed(source.read, ttl=0.05, name="the test value")
    with caplog.at_level(logging.ERROR, logger="agents.refreshed"):
        keeper = asyncio.create_task(kept.keep_fresh())
        try:
            await asyncio.sleep(0.3)
            assert 2 <= source.reads <= 12  # tried again, not in a busy loop
            source.fail = False
            await asyncio.sleep(0.2)
            assert kept.value == "first"
        finally:
            keeper.cancel()
    assert "could not read the test value again" in caplog.text
