"""Whether a run's owning process is gone, so its thread may heal."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from runhost.registry import LiveRun, RunRegistry
from threads import leases
from threads.dbthread import on_db_thread
from threads.leases import owner_is_gone

HOST = socket.gethostname()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_expired_lease_means_gone_wherever_the_owner_ran():
    past = timezone.now() - timedelta(seconds=1)
    assert owner_is_gone("elsewhere:123", past)
    assert owner_is_gone(f"{HOST}:{os.getpid()}", past)
    assert owner_is_gone("elsewhere:123", None)


def test_a_dead_process_on_this_host_is_gone_before_its_lease_ends():
    future = timezone.now() + timedelta(seconds=30)
    assert owner_is_gone(f"{HOST}:{_dead_pid()}", future)


def test_a_live_process_holds_its_runs_while_the_lease_lasts():
    future = timezone.now() + timedelta(seconds=30)
    assert not owner_is_gone(f"{HOST}:{os.getppid()}", future)
    assert not owner_is_gone(f"{HOST}:{os.getpid()}", future)
    assert not owner_is_gone("another-host:1", future)


def test_a_waiting_run_outlives_its_process_and_a_new_message_supersedes_its_question(db):
    """A run that waits is held by no process: its owner dying changes nothing. The thread's next
    message closes the question as superseded and the agent run goes on from the checkpoint."""
    from agents.models import Agent
    from orchestrator.waits import Checkpoint, OpenCall, WaitKind
    from threads.models import Approval, Run, Session, Thread
    from threads.services.runs import run_open

    thread = Thread.objects.create(agui_thread_id="t-heal-approval", agent=Agent.objects.get(name="coder"))
    call = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}
    Session.objects.create(
        thread=thread, turns=[{"role": "user", "content": "go"}, {"role": "assistant", "content": [call]}]
    )
    checkpoint = Checkpoint(
        open=[OpenCall("toolu_1", "bash", WaitKind.APPROVAL, "ap-dead", expires_at="2999-01-01T00:00:00Z")]
    )
    waiting = Run.objects.create(
        thread=thread,
        agui_run_id="r1",
        status=Run.Status.WAITING,
        owner=f"{HOST}:{_dead_pid()}",
        checkpoint={"loop": checkpoint.to_json(), "clientTools": []},
    )
    Approval.objects.create(
        id="ap-dead",
        run=waiting,
        tool_call_id="toolu_1",
        tool="bash",
        message="?",
        expires_at=timezone.now() + timedelta(hours=1),
    )
    opened = run_open(
        agent_name="coder",
        agui_thread_id="t-heal-approval",
        agui_run_id="r2",
        run_pk=None,
        new_user_message={"id": "u2", "role": "user", "content": "still there?"},
        protocol_version="1.0",
        live_run_ids=set(),
    )
    assert opened.run is not None and opened.run.parent_id == waiting.pk
    assert opened.superseded is not None
    _checkpoint, answers = opened.superseded
    assert answers["ap-dead"].superseded
    waiting.refresh_from_db()
    assert waiting.status == Run.Status.SUCCEEDED
    closed = Approval.objects.get(pk="ap-dead")
    assert closed.decision == Approval.Decision.SUPERSEDED and closed.reason == "still there?"
    # The open call is the loop's to answer: the session was not healed behind its back.
    assert Session.objects.get(thread=thread).turns[-1]["role"] == "assistant"


@pytest.mark.django_db(transaction=True)
async def test_leases_are_renewed_while_the_database_thread_is_busy_for_longer_than_a_lease(coder, settings):
    """The renewals do not queue behind the process's other database work (a takeover of many runs, a
    hundred starting at once): with the database thread held for two leases' time, the run's lease is
    renewed meanwhile and never lapses, so no other process takes a live run for a dead one."""
    from threads.models import Run, Thread

    settings.RUN_LEASE_SECONDS = 1.5  # renewed every half second
    thread = await Thread.objects.acreate(agui_thread_id="t-busy-leases", agent=coder)
    run = await Run.objects.acreate(
        thread=thread, agui_run_id="r1", owner=leases.owner_id(), lease_expires_at=leases.lease_until()
    )
    registry = RunRegistry()
    registry.register(LiveRun(run_pk=run.pk, agui_thread_id=thread.agui_thread_id))
    busy = asyncio.ensure_future(on_db_thread(_hold, seconds=5.0))  # the database thread, held
    lapsed = []
    try:
        for _ in range(12):
            await asyncio.sleep(0.25)
            expires = await sync_to_async(_lease_of, thread_sensitive=False)(run.pk)
            lapsed.append(expires < timezone.now())
        assert not busy.done()  # all of it while the database thread was held
    finally:
        registry.by_thread.clear()
        await busy
    assert not any(lapsed), lapsed


def _hold(*, seconds: float) -> None:
    time.sleep(seconds)


def _lease_of(run_pk):
    from threads.models import Run

    return Run.objects.get(pk=run_pk).lease_expires_at
