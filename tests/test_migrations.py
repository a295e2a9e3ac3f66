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


def test_the_seeded_agent_takes_the_seeds_defaults_unless_someone_changed_them(db):
    migration = importlib.import_module("agents.migrations.0005_agent_environment_block_and_seed_defaults")
    coder = Agent.objects.get(name="coder")
    assert (coder.max_iterations, coder.max_tokens) == (20, 4096)  # as a fresh install has it
    Agent.objects.filter(name="coder").update(max_iterations=50, max_tokens=8192)
    Agent.objects.create(name="tuned", max_iterations=50, max_tokens=8192)
    migration.seeded_agent_to_seed_defaults(apps, None)
    assert Agent.objects.get(name="coder").max_iterations == 20
    assert Agent.objects.get(name="tuned").max_iterations == 50  # not the seeded agent: left alone
    Agent.objects.filter(name="coder").update(max_iterations=35, max_tokens=8192)
    migration.seeded_agent_to_seed_defaults(apps, None)
    assert Agent.objects.get(name="coder").max_iterations == 35  # an operator's choice is kept
