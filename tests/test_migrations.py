"""Data migrations, run on rows as earlier versions left them."""

from __future__ import annotations

import importlib

from django.apps import apps

from agents.models import Agent
from threads.models import Run, Thread


def test_answered_runs_left_waiting_by_earlier_versions_are_finished(db):
    migration = importlib.import_module("threads.migrations.0010_answered_waiting_runs_finished")
    thread = Thread.objects.create(agui_thread_id="t-old", agent=Agent.objects.get(name="coder"))
    answered = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.WAITING, outcome="interrupt")
    Run.objects.create(thread=thread, agui_run_id="r1-continued", parent=answered, status=Run.Status.SUCCEEDED)
    still_waiting = Run.objects.create(thread=thread, agui_run_id="r2", status=Run.Status.WAITING)
    migration.finish_answered(apps, None)
    answered.refresh_from_db()
    still_waiting.refresh_from_db()
    assert (answered.status, answered.outcome) == (Run.Status.SUCCEEDED, "interrupt")
    assert still_waiting.status == Run.Status.WAITING
