"""The operator's admin: agents, threads, runs with their event log, and cancelling a run."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from threads.models import Run, RunEvent, Thread


@pytest.fixture
def operator(client, transactional_db):
    user = User.objects.create_superuser("operator", "op@example.com", "a-long-password")
    client.force_login(user)
    return client


@pytest.fixture
def run(coder):
    thread = Thread.objects.create(agui_thread_id="t-admin", agent=coder, title="a thread")
    run = Run.objects.create(thread=thread, agui_run_id="r-admin")
    RunEvent.objects.create(run=run, seq=1, type="RUN_STARTED", payload='{"type":"RUN_STARTED"}')
    return run


def test_the_pages_an_operator_uses_render(operator, run):
    for url in (
        "/admin/agents/agent/",
        f"/admin/agents/agent/{run.thread.agent.pk}/change/",
        "/admin/threads/thread/",
        f"/admin/threads/thread/{run.thread.pk}/change/",
        "/admin/threads/run/",
        f"/admin/threads/run/{run.pk}/change/",
    ):
        response = operator.get(url)
        assert response.status_code == 200, url
    assert b"RUN_STARTED" in operator.get(f"/admin/threads/run/{run.pk}/change/").content


def test_cancel_from_the_admin_asks_the_run_to_stop(operator, run):
    response = operator.post(
        "/admin/threads/run/", {"action": "cancel_runs", "_selected_action": [str(run.pk)]}, follow=True
    )
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.cancel_requested
    assert b"Asked 1 run(s) to stop" in response.content
