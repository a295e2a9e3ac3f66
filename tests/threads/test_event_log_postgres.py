"""On PostgreSQL the event log's frames (bytea) bring every payload back byte for byte, and the
chunks of several runs go in together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.procs import ROOT

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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DJANGO_"))}
    env |= {
        "DATABASE_URL": postgres_url,
        "THREADLINE_DATA_DIR": str(tmp_path),
        "AGENT_WORKSPACE": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "LOG_LEVEL": "WARNING",
    }
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, input=json.dumps(PAYLOADS), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == [[seq, "TEXT_MESSAGE_CONTENT", p, True] for seq, p in enumerate(PAYLOADS, 1)]
    assert report["errors"] == []
    assert report["together"] == [list(range(1, len(PAYLOADS) + 2)), [1]]
    assert report["by_run"] == [["run_id", "last_seq"]]  # no index on run alone here either
    assert report["exists"] == [True, False]
