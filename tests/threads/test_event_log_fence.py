"""A run's log is written only by the process that holds the run (issue #45): a process that stalled
past its lease and wakes after another took the run over, or after its run was healed, writes nothing
more into the log, checked in the write's own transaction. On PostgreSQL a takeover waits for such a
write in flight and reads the log with it, so no batch lands behind its back."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from orchestrator.waits import Checkpoint, Counters
from tests.eventlogs import logged
from tests.procs import postgres_env, script_report
from threads import leases
from threads.eventlog import UNLOGGED_AHEAD, EventLogWriter, insert_event_chunks, insert_events
from threads.healing import runs_heal
from threads.models import Run, Session, Thread
from threads.takeover import RunTakenOver, run_take_over, step_record


def _dead_owner() -> str:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{socket.gethostname()}:{child.pid}"


@pytest.fixture
def run(coder, transactional_db):
    """A running run at its second step, owned by a process that died: any process may take it over."""
    thread = Thread.objects.create(agui_thread_id="t-fence", agent=coder)
    Session.objects.create(thread=thread, turns=[{"role": "user", "content": "go"}])
    return Run.objects.create(
        thread=thread,
        agui_run_id="r1",
        owner=_dead_owner(),
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        checkpoint=step_record(Checkpoint(counters=Counters(iteration=2)), []),
    )


def test_a_write_fenced_by_the_count_it_had_is_refused_once_the_run_was_taken_over(run):
    insert_events(run.pk, [(1, "RUN_STARTED", "{}"), (2, "TEXT_MESSAGE_START", "{}")], takeovers=0)
    taken = run_take_over(run_id=run.pk)
    assert taken is not None and taken.after == 2 + UNLOGGED_AHEAD
    with pytest.raises(RunTakenOver):
        insert_events(run.pk, [(3, "TEXT_MESSAGE_CONTENT", '{"delta":"stale"}')], takeovers=0)
    # The new owner's writes, fenced by its own count, go on.
    insert_events(run.pk, [(taken.after + 1, "TEXT_MESSAGE_END", "{}")], takeovers=1)
    assert [e.seq for e in logged(run)] == [1, 2, taken.after + 1]


def test_a_write_of_a_healed_run_is_refused(run):
    insert_events(run.pk, [(1, "RUN_STARTED", "{}")], takeovers=0)
    runs_heal(run_ids=[run.pk], now=timezone.now())
    ended = [e.seq for e in logged(run)]
    with pytest.raises(RunTakenOver):
        insert_events(run.pk, [(2, "TEXT_MESSAGE_START", "{}")], takeovers=0)
    assert [e.seq for e in logged(run)] == ended


def test_in_a_group_commit_only_the_run_taken_over_loses_its_chunk(run):
    other = Run.objects.create(thread=run.thread, agui_run_id="r2", owner=leases.owner_id())
    insert_events(run.pk, [(1, "RUN_STARTED", "{}")])
    Run.objects.filter(pk=run.pk).update(takeovers=1)
    errors = insert_event_chunks(
        [(run.pk, [(2, "CUSTOM", "{}")]), (other.pk, [(1, "RUN_STARTED", "{}")])],
        fences={run.pk: 0, other.pk: 0},
    )
    assert isinstance(errors[0], RunTakenOver) and errors[1] is None
    assert [e.seq for e in logged(run)] == [1]
    assert [e.seq for e in logged(other)] == [1]


async def test_a_writer_whose_run_was_taken_over_writes_nothing_more(run):
    writer = EventLogWriter(run.pk, flush_seconds=0.001, batch=2000, takeovers=0)
    durable = asyncio.Event()
    writer.on_durable = lambda _: durable.set()
    writer.append(1, "RUN_STARTED", "{}")
    async with asyncio.timeout(5):
        await durable.wait()
    assert await sync_to_async(run_take_over)(run_id=run.pk) is not None
    for seq in range(2, 6):
        writer.append(seq, "TEXT_MESSAGE_CONTENT", '{"delta":"stale"}')
    async with asyncio.timeout(5):
        await writer.close()
    assert (writer.written, writer.durable) == (1, 1)
    assert [e.seq for e in await sync_to_async(logged)(run)] == [1]


# Two connections: a log write of the run's first owner, in flight (its transaction open for a second),
# and a takeover that starts during it. The takeover must wait for the write's commit and continue
# after the batch, rather than read the log without it and leave the batch in its continuation's gap.
RACE = """
import json, socket, subprocess, sys, threading, time
from datetime import timedelta
import django
django.setup()
from django.db import connection, transaction
from django.utils import timezone
from agents.models import Agent
from orchestrator.waits import Checkpoint, Counters
from threads.eventlog import UNLOGGED_AHEAD, insert_events
from threads.models import Run, Session, Thread
from threads.takeover import run_take_over, step_record

child = subprocess.Popen([sys.executable, "-c", "pass"]); child.wait()
thread = Thread.objects.create(agui_thread_id="t-race", agent=Agent.objects.get(name="coder"))
Session.objects.create(thread=thread, turns=[{"role": "user", "content": "go"}])
run = Run.objects.create(
    thread=thread, agui_run_id="r1", owner=f"{socket.gethostname()}:{child.pid}",
    lease_expires_at=timezone.now() - timedelta(seconds=1),
    checkpoint=step_record(Checkpoint(counters=Counters(iteration=1)), []),
)
insert_events(run.pk, [(1, "RUN_STARTED", "{}")])
writing = threading.Event()
result = {}

def stale_write():
    with transaction.atomic():
        insert_events(run.pk, [(2, "TEXT_MESSAGE_START", "{}"), (3, "TEXT_MESSAGE_CONTENT", "{}")], takeovers=0)
        writing.set()
        time.sleep(1.0)
    result["committed"] = time.monotonic()
    connection.close()

def take_over():
    writing.wait(10)
    started = time.monotonic()
    taken = run_take_over(run_id=run.pk)
    result["took"] = time.monotonic()
    result["after"] = taken.after if taken else None
    result["waited"] = result["took"] - started
    connection.close()

threads = [threading.Thread(target=stale_write), threading.Thread(target=take_over)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"after": result["after"], "expected": 3 + UNLOGGED_AHEAD,
                  "waited": result["waited"], "order": result["took"] >= result["committed"]}))
"""


@pytest.mark.services
def test_on_postgresql_a_takeover_waits_for_the_old_owners_log_write_in_flight(postgres_url, tmp_path: Path):
    report = script_report(RACE, postgres_env(postgres_url, tmp_path))
    assert report["order"] and report["waited"] > 0.5, report
    assert report["after"] == report["expected"], report
