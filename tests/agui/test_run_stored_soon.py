"""A run's RUN_STARTED is sent before the run is stored (its first byte waits on no database work). A
client that cancels or reattaches it at once, through another process, names a run whose row is a
moment away: it is found once stored (agui/views.py RUN_STORED_SECONDS), not refused with a 404."""

from __future__ import annotations

import threading
from datetime import timedelta

import httpx
from django.db import connection
from django.utils import timezone

from threads.eventlog import insert_events
from threads.models import Run, Thread

AUTH = {"Authorization": "Bearer test-token"}


def _stored_later(coder, *, status: str, seconds: float = 0.4) -> threading.Thread:
    """Stores thread t-soon and its run r1 after ``seconds``, as run_open does once RUN_STARTED is out."""

    def store() -> None:
        threading.Event().wait(seconds)
        thread = Thread.objects.create(agui_thread_id="t-soon", agent=coder)
        run = Run.objects.create(
            thread=thread,
            agui_run_id="r1",
            status=status,
            owner="another-host:1",
            lease_expires_at=timezone.now() + timedelta(seconds=60),
        )
        finished = '{"type":"RUN_FINISHED","threadId":"t-soon","runId":"r1"}'
        insert_events(run.pk, [(1, "RUN_STARTED", "{}"), (2, "RUN_FINISHED", finished)])
        connection.close()

    storing = threading.Thread(target=store)
    storing.start()
    return storing


def test_a_cancel_sent_before_the_run_is_stored_reaches_it(server, coder):
    storing = _stored_later(coder, status=Run.Status.RUNNING)
    cancelled = httpx.post(f"{server.url}/agui/coder/threads/t-soon/runs/r1/cancel", headers=AUTH, timeout=10)
    storing.join()
    assert cancelled.status_code == 202, cancelled.text
    assert Run.objects.get(agui_run_id="r1").cancel_requested


def test_a_reattach_sent_before_the_run_is_stored_follows_it(server, coder):
    storing = _stored_later(coder, status=Run.Status.SUCCEEDED)
    followed = httpx.get(f"{server.url}/agui/coder/threads/t-soon/runs/r1/events", headers=AUTH, timeout=10)
    storing.join()
    assert followed.status_code == 200, followed.text
    assert b"RUN_FINISHED" in followed.content


def test_a_run_that_never_comes_is_still_a_404(server):
    response = httpx.post(f"{server.url}/agui/coder/threads/t-none/runs/r1/cancel", headers=AUTH, timeout=10)
    assert response.status_code == 404 and response.json()["error"]["code"] == "unknown_run"
