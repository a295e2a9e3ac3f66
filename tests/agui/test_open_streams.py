"""Open SSE streams cost no OS thread each: the thread count stays flat however many follow a run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta

import httpx
from django.db import connection
from django.utils import timezone

from tests.eventlogs import log_events
from tests.fakes.anthropic_api import split_tokens, text_turn
from tests.helpers import run_input, user, v1
from threads.models import Run, Session, Thread

HEADERS = {"Authorization": "Bearer test-token"}
STREAMS = 200
# Threads that may come and go in this process while streams open (an executor's worker,
# the test client's own); far fewer than one per stream.
SLACK = 10


async def _hold_streams(url: str, count: int, while_open: Callable[[], Awaitable[None]]) -> list[bytes]:
    """Opens ``count`` GET streams of ``url``, waits until each has sent a data frame, runs
    ``while_open``, then reads every stream to its end; returns the bodies."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        ready = [asyncio.Event() for _ in range(count)]

        async def follow(i: int) -> bytes:
            body = bytearray()
            async with client.stream("GET", url, headers=HEADERS) as response:
                assert response.status_code == 200
                async for chunk in response.aiter_raw():
                    body += chunk
                    if b"data: " in body:
                        ready[i].set()
            return bytes(body)

        tasks = [asyncio.create_task(follow(i)) for i in range(count)]
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in ready)), 60)
        await while_open()
        return await asyncio.wait_for(asyncio.gather(*tasks), 60)


def test_reattach_streams_of_a_live_run_hold_no_thread_each(server, fake_api):
    paused = text_turn(split_tokens("one two three four five six")).pause(after_events=5)
    fake_api.script([paused])
    with httpx.stream(
        "POST", f"{server.url}/agui/coder", json=v1(run_input("t-open", "r1", user("count"))), headers=HEADERS
    ) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # the run is live; this client goes away
    assert paused.paused.wait(10)
    before = threading.active_count()
    counted: list[int] = []

    async def count_then_resume() -> None:
        counted.append(threading.active_count())
        paused.resume.set()

    bodies = asyncio.run(
        _hold_streams(f"{server.url}/agui/coder/threads/t-open/runs/r1/events", STREAMS, count_then_resume)
    )
    assert counted[0] <= before + SLACK, f"{counted[0] - before} more threads with {STREAMS} streams open"
    assert all(b'"RUN_FINISHED"' in body for body in bodies)
    server.drain()


def test_followers_of_a_run_owned_by_another_process_hold_no_thread_each(server, coder):
    thread = Thread.objects.create(agui_thread_id="t-foreign", agent=coder)
    Session.objects.create(thread=thread)
    run = Run.objects.create(
        thread=thread,
        agui_run_id="r1",
        status=Run.Status.RUNNING,
        owner="another-host:1",
        lease_expires_at=timezone.now() + timedelta(seconds=60),
    )
    log_events(run, [{"type": "RUN_STARTED", "threadId": "t-foreign", "runId": "r1"}])
    before = threading.active_count()
    counted: list[int] = []

    async def count_then_finish() -> None:
        counted.append(threading.active_count())

        def finish() -> None:
            # What the owning process writes when its run ends.
            try:
                log_events(run, [{"type": "RUN_FINISHED", "threadId": "t-foreign", "runId": "r1"}])
                Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
            finally:
                connection.close()

        await asyncio.to_thread(finish)

    bodies = asyncio.run(
        _hold_streams(f"{server.url}/agui/coder/threads/t-foreign/runs/r1/events", STREAMS, count_then_finish)
    )
    assert counted[0] <= before + SLACK, f"{counted[0] - before} more threads with {STREAMS} streams open"
    assert all(body.count(b"data: ") == 2 and b'"RUN_FINISHED"' in body for body in bodies), bodies[0]
