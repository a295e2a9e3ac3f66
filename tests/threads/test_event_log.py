"""The durable event log gathers events into batches instead of a round trip per event, and keeps
each batch as one frame (threads/logframes.py), read back event by event from any position."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection

from tests.eventlogs import logged
from threads import eventlog, logframes
from threads.eventlog import EventLogWriter, insert_event_chunks, insert_events
from threads.models import EventFrame, Run, Thread
from threads.selectors import RunEventPages, run_events_after, run_events_total


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
    events = await sync_to_async(logged)(run)
    assert [e.seq for e in events] == list(range(1, 5001))
    assert [e.payload for e in events[:2]] == [
        '{"type":"TEXT_MESSAGE_CONTENT","delta":"1"}',
        '{"type":"TEXT_MESSAGE_CONTENT","delta":"2"}',
    ]
    # A row per batch written (one of up to 2,000 events), not one per event.
    assert writer.writes <= await EventFrame.objects.filter(run=run).acount() <= writer.writes + 2


async def test_close_waits_until_everything_is_durable(run):
    writer = EventLogWriter(run.pk, flush_seconds=10, batch=2000)
    writer.append(1, "RUN_STARTED", '{"type":"RUN_STARTED"}')
    await asyncio.sleep(0.05)  # the writer is now gathering
    async with asyncio.timeout(2):
        await writer.close()  # does not wait for the 10 s flush interval
    assert [e.seq for e in await sync_to_async(logged)(run)] == [1]


def test_a_frame_keeps_every_event_and_its_payload_byte_for_byte(run):
    payloads = ['{"delta":"100%s \\t"}', "raw\ttab\nnewline\rreturn\\ \\N é 漢字 \u2028", "", "{}" * 5000]
    rows = [(seq, f"TYPE_{seq}", payload) for seq, payload in enumerate(payloads * 300, 1)]
    insert_events(run.pk, rows)
    assert [(e.seq, e.type, e.payload) for e in logged(run)] == rows
    assert EventFrame.objects.filter(run=run).count() == 1


def test_a_sqlite_with_the_old_limit_on_parameters_takes_a_long_batch_too(run):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's own limit")
    connection.ensure_connection()
    raw = connection.connection
    before = raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)  # the limit before SQLite 3.32
    try:
        runs = [Run.objects.create(thread=run.thread, agui_run_id=f"r-limit-{n}") for n in range(250)]
        errors = insert_event_chunks([(r.pk, [(1, "RUN_STARTED", "{}"), (2, "CUSTOM", "{}")]) for r in runs])
    finally:
        raw.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, before)
    assert errors == [None] * 250
    assert run_events_total(run_ids=[r.pk for r in runs]) == 500


def test_the_log_is_indexed_by_run_once_with_its_last_seq(db):
    # Each index costs every frame a write: the one on (run, last_seq) serves lookups by run too.
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, EventFrame._meta.db_table)
    by_run = [c["columns"] for c in constraints.values() if (c["index"] or c["unique"]) and "run_id" in c["columns"]]
    assert by_run == [["run_id", "last_seq"]]


def test_a_batch_written_twice_is_refused(run):
    # A retry of a batch whose first attempt committed before its connection failed.
    insert_events(run.pk, [(seq, "CUSTOM", "{}") for seq in range(1, 150)])
    with pytest.raises(IntegrityError):
        insert_events(run.pk, [(seq, "CUSTOM", "{}") for seq in range(1, 150)])
    assert [e.seq for e in logged(run)] == list(range(1, 150))


def test_a_batch_whose_seqs_are_not_contiguous_is_refused_whole(run):
    with pytest.raises(ValueError, match="contiguous"):
        insert_events(run.pk, [(seq, "CUSTOM", "{}") for seq in range(2, 150)] + [(1, "CUSTOM", "{}")])
    assert logged(run) == []


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
    assert isinstance(errors[1], ValueError)
    assert [e.seq for e in logged(run)] == [1, 2]
    assert [e.seq for e in logged(other)] == [1]


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
        events = await sync_to_async(logged)(r)
        assert [e.seq for e in events] == list(range(1, 301))


async def test_chunks_of_runs_that_come_within_the_gathering_share_one_transaction(run, settings):
    # At a model's pace each run's chunk comes on its own, spread over its half second: six
    # of them 10 ms apart are written together, not in six transactions.
    settings.EVENT_LOG_GROUP_SECONDS = 0.3
    others = [await Run.objects.acreate(thread_id=run.thread_id, agui_run_id=f"r-paced-{n}") for n in range(5)]
    writers = [EventLogWriter(r.pk, flush_seconds=0.001, batch=2000) for r in [run, *others]]
    durable = [asyncio.Event() for _ in writers]
    for writer, logged_it in zip(writers, durable, strict=True):
        writer.on_durable = lambda _seq, logged_it=logged_it: logged_it.set()
        writer.append(1, "TEXT_MESSAGE_CONTENT", '{"delta":"a"}')
        await asyncio.sleep(0.01)
    async with asyncio.timeout(5):
        await asyncio.gather(*(logged_it.wait() for logged_it in durable))
    assert eventlog._group_commit().transactions == 1
    await asyncio.gather(*(writer.close() for writer in writers))


async def _a_chunk_gathering_for_a_second(run: Run, settings: Any) -> EventLogWriter:
    """A writer whose first chunk is with the group commit, gathering for up to a second."""
    settings.EVENT_LOG_GROUP_SECONDS = 1.0
    writer = EventLogWriter(run.pk, flush_seconds=0.001, batch=2000)
    writer.append(1, "TEXT_MESSAGE_CONTENT", '{"delta":"a"}')
    await asyncio.sleep(0.05)
    return writer


async def test_a_hurried_event_is_written_without_waiting_for_the_gathering(run, settings):
    # A part's start is shown once it is logged (agui/stream.py): it does not wait out the gathering
    # of the chunk before it, nor gather one of its own.
    loop = asyncio.get_running_loop()
    writer = await _a_chunk_gathering_for_a_second(run, settings)
    started_logged = asyncio.Event()
    writer.on_durable = lambda seq: started_logged.set() if seq >= 2 else None
    writer.append(2, "TEXT_MESSAGE_START", '{"type":"TEXT_MESSAGE_START"}')
    writer.hurry()
    asked = loop.time()
    async with asyncio.timeout(5):
        await started_logged.wait()
    assert loop.time() - asked < 0.5
    await writer.close()
    assert [e.seq for e in await sync_to_async(logged)(run)] == [1, 2]


async def test_a_close_does_not_wait_out_the_gathering_of_the_chunk_before_it(run, settings):
    # A run's end is shown once its log is durable: the close cuts the gathering short.
    loop = asyncio.get_running_loop()
    writer = await _a_chunk_gathering_for_a_second(run, settings)
    writer.append(2, "RUN_FINISHED", '{"type":"RUN_FINISHED"}')
    asked = loop.time()
    await writer.close()
    assert loop.time() - asked < 0.5
    assert [e.seq for e in await sync_to_async(logged)(run)] == [1, 2]


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


def _framed(run: Run, sizes: list[int]) -> list[tuple[int, str, str]]:
    """Logs frames of ``sizes`` events; returns every row."""
    rows, seq = [], 1
    for size in sizes:
        frame = [(s, "TEXT_MESSAGE_CONTENT", f'{{"delta":"{s}"}}') for s in range(seq, seq + size)]
        insert_events(run.pk, frame)
        rows += frame
        seq += size
    return rows


def test_the_log_reads_back_exactly_from_every_position(run):
    rows = _framed(run, [3, 1, 5, 2000, 7])
    assert EventFrame.objects.filter(run=run).count() == 5
    for after in [*range(0, 12), 1000, 2008, 2009, 2010, 2015, 2016, 3000]:
        events = run_events_after(run=run, after=after)
        assert [(e.seq, e.type, e.payload) for e in events] == rows[after:], after
    # A limit reads whole frames, no fewer events than asked, and the reader pages on from the last.
    first = run_events_after(run=run, after=2, limit=4)
    assert [e.seq for e in first] == list(range(3, 10))
    assert run_events_total(run_ids=[run.pk]) == len(rows)


def test_the_rest_api_pages_slice_frames_event_by_event(run):
    rows = _framed(run, [3, 1, 5, 7])
    pages = RunEventPages(run, after=2)
    assert pages.count() == len(rows) - 2
    for start in range(0, 15):
        for stop in range(start, 16):
            assert [e.seq for e in pages[start:stop]] == [seq for seq, _, _ in rows[2:][start:stop]]


def test_a_late_frame_overlapping_a_healed_end_adds_only_what_follows(run):
    # A dead owner's batch written after another process closed its log: the first written wins.
    insert_events(run.pk, [(1, "RUN_STARTED", "{}"), (2, "RUN_ERROR", '{"code":"interrupted"}')])
    insert_events(run.pk, [(2, "TEXT_MESSAGE_CONTENT", "{}"), (3, "TEXT_MESSAGE_CONTENT", "{}")])
    assert [(e.seq, e.type) for e in logged(run)] == [(1, "RUN_STARTED"), (2, "RUN_ERROR"), (3, "TEXT_MESSAGE_CONTENT")]


def test_a_frame_of_text_deltas_is_stored_compressed(run):
    deltas = [f'{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m-1","delta":" word{seq % 50}"}}' for seq in range(2000)]
    body = logframes.encode([("TEXT_MESSAGE_CONTENT", delta) for delta in deltas])
    assert body[:1] == logframes.ZLIB and len(body) * 10 < sum(map(len, deltas))
    # Two events, as a flush at a model's pace holds: the preset dictionary still makes them smaller.
    pair = [("TEXT_MESSAGE_CONTENT", delta) for delta in deltas[:2]]
    assert logframes.encode(pair)[:1] == logframes.ZLIB
    assert logframes.decode(logframes.encode(pair)) == [list(p) for p in pair]


def test_the_preset_dictionary_never_changes_under_stored_frames():
    # The dictionary is built from the vocabulary's events; a change there would make every frame
    # stored with it unreadable. A new dictionary needs a new encoding byte, not an edit to this one.
    digest = hashlib.sha256(logframes.DICTIONARY_V1).hexdigest()
    assert digest == "1cd009466a82da195a4e93668f582f7214aec11afb75d5c481d1d6257d6b48dd"


def test_an_unknown_frame_encoding_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="unknown event frame encoding"):
        logframes.decode(b"x[]")


def test_a_long_batch_is_stored_as_frames_of_at_most_2000_events(run):
    rows = [(seq, "CUSTOM", f'{{"n":{seq}}}') for seq in range(1, 4501)]
    insert_events(run.pk, rows)
    spans = list(EventFrame.objects.filter(run=run).order_by("last_seq").values_list("first_seq", "last_seq"))
    assert spans == [(1, 2000), (2001, 4000), (4001, 4500)]
    assert [(e.seq, e.payload) for e in run_events_after(run=run, after=3999)] == [(s, p) for s, _, p in rows[3999:]]


async def test_a_slow_run_gathers_a_frame_of_several_events_before_writing(run):
    # At a model's pace a flush held two events, and a row of two cost more than they were sent.
    durable: asyncio.Queue[int] = asyncio.Queue()

    async def written(rows: list[tuple[int, str, str]]) -> None:
        durable.put_nowait(len(rows))

    writer = EventLogWriter(
        run.pk, flush_seconds=0.005, batch=2000, max_delay_seconds=30, frame_events=8, after_write=written
    )
    for seq in range(1, 4):
        writer.append(seq, "TEXT_MESSAGE_CONTENT", "{}")
        await asyncio.sleep(0.02)  # past flush_seconds each time
    assert writer.writes == 0  # three events wait for more (or for the 30 s delay)
    for seq in range(4, 9):
        writer.append(seq, "TEXT_MESSAGE_CONTENT", "{}")
    async with asyncio.timeout(5):
        assert await durable.get() == 8
    writer.append(9, "RUN_FINISHED", "{}")
    async with asyncio.timeout(5):
        await writer.close()  # a close does not wait for a frame to fill
    spans = await sync_to_async(lambda: list(EventFrame.objects.filter(run=run).values_list("first_seq", "last_seq")))()
    assert sorted(spans) == [(1, 8), (9, 9)]


async def test_a_slow_run_writes_what_it_has_after_the_longest_delay(run):
    durable: asyncio.Queue[int] = asyncio.Queue()

    async def written(rows: list[tuple[int, str, str]]) -> None:
        durable.put_nowait(len(rows))

    writer = EventLogWriter(
        run.pk, flush_seconds=0.005, batch=2000, max_delay_seconds=0.2, frame_events=8, after_write=written
    )
    writer.append(1, "RUN_STARTED", "{}")
    async with asyncio.timeout(5):
        assert await durable.get() == 1  # alone, once 0.2 s have passed
    await writer.close()
