"""The admin's run page shows each takeover and hand-over of a run (issue #45 item 3): when, which kind,
from which process to which, after how many model turns. The history is made by the real hand-over
(``run_release``, a draining process) and takeover (``run_take_over``) on the database, and only
crashes count towards RUN_MAX_TAKEOVERS."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.utils import timezone

from agents.models import Agent
from orchestrator.waits import Checkpoint, Counters
from threads import leases
from threads.models import Run, Session, Thread
from threads.takeover import crashes, run_release, run_take_over, step_record


@pytest.fixture
def operator(client, transactional_db):
    user = User.objects.create_superuser("operator", "op@example.com", "a-long-password")
    client.force_login(user)
    return client


def _dead_owner() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}"


def _running(coder: Agent, iteration: int) -> Run:
    thread = Thread.objects.create(agui_thread_id="t-moved", agent=coder)
    Session.objects.create(thread=thread, turns=[{"role": "user", "content": "go"}])
    return Run.objects.create(
        thread=thread,
        agui_run_id="r1",
        owner=leases.owner_id(),
        lease_expires_at=timezone.now() + timedelta(seconds=60),
        checkpoint=step_record(Checkpoint(counters=Counters(iteration=iteration)), []),
    )


@override_settings(RUN_MAX_TAKEOVERS=1)
def test_a_run_handed_over_and_then_taken_over_after_a_crash_shows_both_on_its_page(operator, coder):
    run = _running(coder, iteration=2)
    this = leases.owner_id()
    # Its process drains: the run is handed over, and taken over (here by this same process).
    run_release(run_id=run.pk, takeovers=0)
    assert run_take_over(run_id=run.pk) is not None
    run.refresh_from_db()
    assert (run.takeovers, run.handovers, crashes(run)) == (1, 1, 0)
    # Then that process dies at step 3: a crash, the first one RUN_MAX_TAKEOVERS (1) allows.
    Run.objects.filter(pk=run.pk).update(
        owner=_dead_owner(), checkpoint=step_record(Checkpoint(counters=Counters(iteration=3)), [])
    )
    dead = Run.objects.get(pk=run.pk).owner
    assert run_take_over(run_id=run.pk) is not None
    run.refresh_from_db()
    assert (run.status, run.takeovers, run.handovers, crashes(run)) == ("running", 2, 1, 1)
    handed, crashed = run.takeover_history
    assert handed["kind"] == "handover" and handed["from"] == this and handed["by"] == this
    assert handed["step"] == 2 and handed["takenAt"] >= handed["at"]
    assert crashed["kind"] == "crash" and crashed["from"] == dead and crashed["by"] == this and crashed["step"] == 3

    page = operator.get(f"/admin/threads/run/{run.pk}/change/").content.decode()
    table = page[page.index('class="tl-takeovers"') :].split("</table>", 1)[0]
    assert table.count("<tr>") == 3  # the head and one row each
    assert "handed over (its process drained)" in table and "taken over (its process died)" in table
    assert table.index("handed over") < table.index("taken over")
    assert dead in table and this in table and "<td>2</td>" in table and "<td>3</td>" in table
    assert handed["takenAt"] in table and crashed["at"] in table


def test_a_run_never_taken_over_says_so(operator, coder):
    run = _running(coder, iteration=0)
    page = operator.get(f"/admin/threads/run/{run.pk}/change/").content.decode()
    assert "takeovers and hand-overs" in page.lower() and 'class="tl-takeovers"' not in page
