"""On PostgreSQL the event log's frames (bytea) bring every payload back byte for byte, and the
chunks of several runs go in together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.procs import postgres_env, script_report

pytestmark = pytest.mark.services

PAYLOADS = [
    '{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"tok "}',
    '{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a\\\\b \\"q\\" \\n\\t"}',
    "raw\ttab\nnewline\rreturn\\backslash \\N é 漢字 \u2028",
    "",
]

SCRIPT = """
import json, sys, uuid
import django
django.setup()
from django.utils import timezone
from agents.models import Agent
from django.db import connection
from threads import fastsql
from threads.eventlog import insert_event_chunks, insert_events
from threads.models import EventFrame, Run, Session, Thread
from threads.selectors import run_events_after

payloads = json.loads(sys.stdin.read())
thread = Thread.objects.create(agui_thread_id="t-copy", agent=Agent.objects.get(name="coder"))
Session.objects.create(thread=thread)
run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.RUNNING)
insert_events(run.pk, [(seq, "TEXT_MESSAGE_CONTENT", p) for seq, p in enumerate(payloads, 1)])
rows = [(e.seq, e.type, e.payload, e.created_at) for e in run_events_after(run=run, after=0)]
other = Run.objects.create(thread=thread, agui_run_id="r2", status=Run.Status.RUNNING)
errors = insert_event_chunks([(run.pk, [(len(payloads) + 1, "CUSTOM", "{}")]), (other.pk, [(1, "RUN_STARTED", "{}")])])
together = [[e.seq for e in run_events_after(run=r, after=0)] for r in (run, other)]
with connection.cursor() as cursor:
    constraints = connection.introspection.get_constraints(cursor, EventFrame._meta.db_table)
by_run = [c["columns"] for c in constraints.values() if (c["index"] or c["unique"]) and "run_id" in c["columns"]]
exists = [fastsql.exists(Run, thread=thread.pk, status=status) for status in (Run.Status.RUNNING, Run.Status.WAITING)]
print(json.dumps({
    "exists": exists,
    "rows": [[seq, type_, payload, created.tzinfo is not None] for seq, type_, payload, created in rows],
    "errors": [repr(e) for e in errors if e is not None], "together": together, "by_run": by_run,
}))
"""


def test_the_event_log_round_trips_every_payload_on_postgresql(postgres_url, tmp_path: Path):
    report = script_report(SCRIPT, postgres_env(postgres_url, tmp_path), stdin=json.dumps(PAYLOADS))
    assert report["rows"] == [[seq, "TEXT_MESSAGE_CONTENT", p, True] for seq, p in enumerate(PAYLOADS, 1)]
    assert report["errors"] == []
    assert report["together"] == [list(range(1, len(PAYLOADS) + 2)), [1]]
    assert report["by_run"] == [["run_id", "last_seq"]]  # no index on run alone here either
    assert report["exists"] == [True, False]
