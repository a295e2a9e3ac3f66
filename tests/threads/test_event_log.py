"""The durable event log gathers events into batches instead of a round trip per event."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection

from threads.eventlog import EventLogWriter, insert_event_chunks, insert_events
from threads.models import Run, RunEvent, Thread


@pytest.fixture
def run(coder):
    thread = Thread.objects.create(agui_thread_id="t-log", agent=coder)
    return Run.objects.create(thread=thread, agui_run_id="r-log")


async def test_a_burst_of_events_is_written_in_a_few_batches(run):
    writer = EventLogWriter(run.pk, flush_seconds=0.01, batch=2000)
    for seq in range(1, 5001):
        writer.append(seq, "TEXT_MESSAGE_CONTENT", f'{{"type":"TEXT_MESSAGE_CONTENT","delta":"{seq}"}}')
    await writer.close()
    assert writer.written == 5000
    assert writer.writes <= 3
    seqs = await sync_to_async(lambda: list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)))()
    assert seqs == list(range(1, 5001))


async def test_close_waits_until_everything_is_durable(run):
    writer = EventLogWriter(run.pk, flush_seconds=10, batch=2000)
    writer.append(1, "RUN_STARTED", '{"type":"RUN_STARTED"}')
    await asyncio.sleep(0.05)  # the writer is now gathering
    async with asyncio.timeout(2):
        await writer.close()  # does not wait for the 10 s flush interval
    assert await RunEvent.objects.filter(run=run).acount() == 1


def test_a_batch_longer_than_one_statement_keeps_every_row_and_its_values(run):
    # 1,234 rows: statements of 1,024, 128, 64, 16 and 2 rows on SQLite, one COPY on PostgreSQL.
    rows = [(seq, "TEXT_MESSAGE_CONTENT", f'{{"delta":"{seq} 100%s \\t"}}') for seq in range(1, 1235)]
    insert_events(run.pk, rows)
    stored = list(RunEvent.objects.filter(run=run).values_list("seq", "type", "payload"))
    assert stored == rows


def test_a_sqlite_with_the_old_limit_on_parameters_takes_a_long_batch_too(run):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's own limit")
    connection.ensure_connection()
    raw = connection.connection
    before = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # the limit before SQLite 3.32
    try:
        rows = [(seq, "CUSTOM", "{}") for seq in range(1, 1235)]
        insert_events(run.pk, rows)
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)
    assert RunEvent.objects.filter(run=run).count() == 1234


def test_the_log_is_indexed_by_run_once_with_its_seq(db):
    # Each index costs every logged event a write: the one on (run, seq) serves lookups by run too.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, RunEvent._meta.db_table)
    by_run = [c["columns"] for c in constraints.values() if (c["index"] or c["unique"]) and "run_id" in c["columns"]]
    assert by_run == [["run_id", "seq"]]


def test_a_seq_written_twice_is_refused_and_the_whole_batch_with_it(run):
    insert_events(run.pk, [(1, "RUN_STARTED", "{}")])
    with pytest.raises(IntegrityError):
        insert_events(run.pk, [(seq, "CUSTOM", "{}") for seq in range(2, 150)] + [(1, "CUSTOM", "{}")])
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1]


def test_chunks_of_several_runs_written_together_fail_alone(run):
    other = Run.objects.create(thread=run.thread, agui_run_id="r-log-2")
    insert_events(other.pk, [(1, "RUN_STARTED", "{}")])
    errors = insert_event_chunks(
        [
            (run.pk, [(1, "RUN_STARTED", "{}"), (2, "CUSTOM", "{}")]),
            (other.pk, [(2, "CUSTOM", "{}"), (1, "CUSTOM", "{}")]),
        ]
    )
    assert errors[0] is None
    assert isinstance(errors[1], IntegrityError)
    assert list(RunEvent.objects.filter(run=run).values_list("seq", flat=True)) == [1, 2]
    assert list(RunEvent.objects.filter(run=other).values_list("seq", flat=True)) == [1]


async def test_writers_of_runs_streaming_at_once_all_become_durable(run):
    others = [await Run.objects.acreate(thread_id=run.thread_id, agui_run_id=f"r-many-{n}") for n in range(5)]
    writers = [EventLogWriter(r.pk, flush_seconds=0.001, batch=2000) for r in [run, *others]]
    for seq in range(1, 301):
        for writer in writers:
            writer.append(seq, "TEXT_MESSAGE_CONTENT", f'{{"delta":"{seq}"}}')
        if seq % 50 == 0:
            await asyncio.sleep(0.002)
    await asyncio.gather(*(writer.close() for writer in writers))
    assert [writer.written for writer in writers] == [300] * 6
    for r in [run, *others]:
        seqs = await sync_to_async(lambda r=r: list(RunEvent.objects.filter(run=r).values_list("seq", flat=True)))()
        assert seqs == list(range(1, 301))


def test_sqlite_copies_the_wal_back_every_4000_pages_and_cuts_it_to_64_mib(db):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's own settings")
    with connection.cursor() as cursor:
        settings = [cursor.execute(f"PRAGMA {name}").fetchone()[0] for name in ("journal_mode", "wal_autocheckpoint")]
        settings.append(cursor.execute("PRAGMA journal_size_limit").fetchone()[0])
    assert settings == ["wal", 4000, 64 * 2**20]


@pytest.mark.django_db(transaction=True)
async def test_the_log_keeps_up_with_a_run_streaming_on_a_busy_loop(run):
    # A run streaming without pause: the log's writes on the database thread must not wait for
    # the loop to go idle (threads/dbthread.py, _GilShare). Without that, 20,000 events were
    # not written after 30 s, with twelve million appended meanwhile; with it, after 31,000.
    writer = EventLogWriter(run.pk, flush_seconds=0.01, batch=2000)
    appended = 0
    while writer.written < 20_000 and appended < 1_000_000:
        appended += 1
        writer.append(appended, "TEXT_MESSAGE_CONTENT", f'{{"type":"TEXT_MESSAGE_CONTENT","delta":"{appended}"}}')
        sum(range(200))  # the rest of an event's work
        if appended % 64 == 0:
            await asyncio.sleep(0)
    written_meanwhile = writer.written
    await writer.close()
    assert writer.written == appended
    assert written_meanwhile >= 20_000, f"{written_meanwhile} of {appended} events written while streaming"
