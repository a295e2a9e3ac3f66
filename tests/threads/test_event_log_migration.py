"""Migration 0015 moves every existing event log from a row per event into frames: each log reads
back exactly as it was, with its times, on SQLite and on PostgreSQL, and the migration reverses."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.procs import ROOT

BEFORE = [("threads", "0014_workspaces")]
AFTER = [("threads", "0015_event_frames")]
T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes("threads")


def _old_logs(apps: Any) -> dict[str, list[tuple[int, str, str, str]]]:
    """Logs in the old form: a long one (past a frame's 2,000 events), one with a gap in its seqs
    (a batch never written), an empty run. Returns run id -> rows (seq, type, payload, created)."""
    from agents.models import Agent  # its table is at its latest migration, not at this state's

    Thread, Run, RunEvent = (apps.get_model("threads", name) for name in ("Thread", "Run", "RunEvent"))
    RunEvent._meta.get_field("created_at").auto_now_add = False
    agent, _ = Agent.objects.get_or_create(name="coder-migration")
    thread = Thread.objects.create(agui_thread_id="t-migrate", agent_id=agent.pk)
    logs: dict[str, list[tuple[int, str, str, str]]] = {}
    for name, seqs in (("long", range(1, 4501)), ("gap", [1, 2, 3, 7, 8]), ("empty", [])):
        run = Run.objects.create(thread=thread, agui_run_id=name, status="succeeded", event_count=len(seqs))
        rows = []
        for seq in seqs:
            payload = orjson.dumps({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"\t{seq} é\n"}).decode()
            rows.append(RunEvent(run=run, seq=seq, type="TEXT_MESSAGE_CONTENT", payload=payload, created_at=T0))
        RunEvent.objects.bulk_create(rows)
        logs[str(run.pk)] = [(e.seq, e.type, e.payload, T0.isoformat()) for e in rows]
    return logs


def migrate_an_old_log_and_back() -> dict[str, Any]:
    """Old logs, migrated forward, read back through the project's reads, then migrated back."""
    from threads.models import EventFrame
    from threads.selectors import run_events_after

    try:
        logs = _old_logs(_migrate(BEFORE))
        _migrate(AFTER)
        read = {
            run_id: [
                (e.seq, e.type, e.payload, e.created_at.isoformat()) for e in run_events_after(run=run_id, after=0)
            ]
            for run_id in logs
        }
        frames = {run_id: EventFrame.objects.filter(run_id=run_id).count() for run_id in logs}
        apps = _migrate(BEFORE)
        RunEvent = apps.get_model("threads", "RunEvent")
        back = {
            run_id: [
                (seq, type_, payload, created.isoformat())
                for seq, type_, payload, created in RunEvent.objects.filter(run_id=run_id)
                .order_by("seq")
                .values_list("seq", "type", "payload", "created_at")
            ]
            for run_id in logs
        }
    finally:
        _migrate(_latest())  # the schema the rest of the suite runs on, later migrations included
    return {"logs": logs, "read": read, "frames": frames, "back": back}


def _check(result: dict[str, Any]) -> None:
    logs = {run_id: [list(row) for row in rows] for run_id, rows in result["logs"].items()}
    as_lists = {run_id: [list(row) for row in rows] for run_id, rows in result["read"].items()}
    assert as_lists == logs
    assert sorted(result["frames"].values()) == [0, 2, 3]  # 4,500 events in 3; the gap splits one in 2
    assert {run_id: [list(row) for row in rows] for run_id, rows in result["back"].items()} == logs


@pytest.mark.django_db(transaction=True)
def test_an_old_log_becomes_frames_and_reads_back_exactly():
    _check(json.loads(json.dumps(migrate_an_old_log_and_back())))


@pytest.mark.services
def test_an_old_log_becomes_frames_on_postgresql(postgres_url: str, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DJANGO_"))}
    env |= {"DATABASE_URL": postgres_url, "THREADLINE_DATA_DIR": str(tmp_path), "AGENT_WORKSPACE": str(tmp_path)}
    env |= {"DJANGO_SETTINGS_MODULE": "project.settings", "LOG_LEVEL": "WARNING"}
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    script = (
        "import json, django; django.setup()\n"
        "from tests.threads.test_event_log_migration import migrate_an_old_log_and_back\n"
        "print(json.dumps(migrate_an_old_log_and_back()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _check(json.loads(done.stdout.strip().splitlines()[-1]))
