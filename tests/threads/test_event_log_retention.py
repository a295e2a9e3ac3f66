"""EVENT_LOG_RETENTION_DAYS and manage.py prune_event_logs: the event logs of runs that ended long
ago are removed; the runs, their thread's messages and their approvals stay, and a reattach to such
a run is told its log is gone instead of waiting."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from tests import api_world as world
from tests.eventlogs import log_events, logged
from threads.models import Approval, EventFrame, Message, Run

HEADERS = {"Authorization": "Bearer test-token"}
START = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
END = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}


def _ended(thread, run_id: str, *, days_ago: float, status: str = "succeeded") -> Run:
    run = world.run(thread, run_id, status=status)
    log_events(run, [START, *({"type": "CUSTOM", "name": "n", "value": i} for i in range(5)), END], per_frame=3)
    finished = timezone.now() - dt.timedelta(days=days_ago)
    Run.objects.filter(pk=run.pk).update(finished_at=finished, event_count=7)
    return Run.objects.get(pk=run.pk)


@pytest.fixture
def history(db):
    people = world.People.create()
    thread = world.thread("t-old", owner=people.owner)
    Message.objects.create(thread=thread, position=0, role="user", body={"role": "user", "content": "hi"})
    old = _ended(thread, "r-old", days_ago=40)
    failed = _ended(thread, "r-failed", days_ago=31, status="failed")
    recent = _ended(thread, "r-recent", days_ago=2)
    waiting = world.run(thread, "r-waiting", status="waiting")
    log_events(waiting, [START])
    Run.objects.filter(pk=waiting.pk).update(finished_at=timezone.now() - dt.timedelta(days=90))
    world.approval(old, "a-old", decision=Approval.Decision.APPROVED)
    return people, thread, old, failed, recent, waiting


def test_the_logs_of_runs_ended_before_the_retention_go_and_nothing_else(history):
    _, thread, old, failed, recent, waiting = history
    out = StringIO()
    with override_settings(EVENT_LOG_RETENTION_DAYS=30):
        call_command("prune_event_logs", stdout=out)
    assert "removed the event logs of 2 run(s)" in out.getvalue() and "(6 frame(s))" in out.getvalue()
    assert logged(old) == [] and logged(failed) == []
    assert len(logged(recent)) == 7 and len(logged(waiting)) == 1  # recent, and still open
    pruned = Run.objects.get(pk=old.pk)
    assert pruned.events_pruned_at is not None and pruned.event_count == 7 and pruned.status == "succeeded"
    assert Run.objects.get(pk=recent.pk).events_pruned_at is None
    assert Approval.objects.filter(run=old).count() == 1
    assert Message.objects.filter(thread=thread).count() == 1
    # Pruning again finds nothing more.
    call_command("prune_event_logs", "--days", "30", stdout=(again := StringIO()))
    assert "of 0 run(s)" in again.getvalue()


def test_a_dry_run_names_the_runs_and_removes_nothing(history):
    _, _, old, failed, *_ = history
    out = StringIO()
    call_command("prune_event_logs", "--days", "30", "--dry-run", stdout=out)
    assert str(old.pk) in out.getvalue() and str(failed.pk) in out.getvalue()
    assert "2 run(s) ended more than 30 days ago" in out.getvalue()
    assert EventFrame.objects.count() == 3 * 3 + 1


def test_without_a_retention_the_command_says_how_to_give_one(history):
    with override_settings(EVENT_LOG_RETENTION_DAYS=0), pytest.raises(CommandError, match="EVENT_LOG_RETENTION_DAYS"):
        call_command("prune_event_logs")
    for days in ("0", "-1", "nan", "inf", "1e9"):
        with pytest.raises(CommandError, match="above 0 and at most 36,500"):
            call_command("prune_event_logs", "--days", days)
    assert EventFrame.objects.count() == 3 * 3 + 1


def test_the_rest_api_answers_410_for_a_pruned_log(history):
    people, _, old, _, recent, _ = history
    call_command("prune_event_logs", "--days", "30", stdout=StringIO())
    response = people.owner.get(f"runs/{old.pk}/events/")
    assert response.status_code == 410 and response.json()["error"]["code"] == "event_log_pruned"
    assert people.owner.get(f"runs/{old.pk}/").json()["eventCount"] == 7  # the run itself stays
    assert people.owner.get(f"runs/{recent.pk}/events/").json()["count"] == 7


def test_a_reattach_to_a_pruned_run_gets_a_clear_answer_at_once(server):
    from agents.models import Agent
    from threads.models import Thread

    thread = Thread.objects.create(agui_thread_id="t-pruned", agent=Agent.objects.get(name="coder"))
    old = _ended(thread, "r-old", days_ago=40)
    call_command("prune_event_logs", "--days", "30", stdout=StringIO())
    for path in ("threads/t-pruned/runs/r-old/events", "threads/t-pruned/events"):
        response = httpx.get(f"{server.url}/agui/coder/{path}", headers={**HEADERS, "Last-Event-ID": "3"}, timeout=5)
        assert response.status_code == 410, path
        assert response.json()["error"]["code"] == "event_log_pruned"
    assert Run.objects.get(pk=old.pk).events_pruned_at is not None
