"""Fuzz: thousands of generated RunAgentInput bodies (deep nesting, NUL, huge ids, wrong types,
unknown interrupts and tool results) against the real server with the demo model, on SQLite and
on PostgreSQL. The figures: no answer >= 500, no stream without RUN_FINISHED/RUN_ERROR, no thread
left busy. bench/reliability.py runs the same for 10,000 bodies and prints the figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz_bodies import Figures, bodies, check_threads_free, fire_all
from tests.procs import ServerProcess

BATCH = 50
BATCHES = 40  # 2,000 bodies per database

FUZZ_SETTINGS = settings(
    max_examples=BATCHES,
    deadline=None,
    derandomize=True,  # the same bodies every run, so a failure here is reproducible
    database=None,
    phases=[Phase.generate],  # no shrinking: each failing body is kept in the figures instead
    suppress_health_check=list(HealthCheck),
)


def _fuzz(url: str, token: str) -> Figures:
    figures = Figures()

    @FUZZ_SETTINGS
    @given(batch=st.lists(bodies, min_size=BATCH, max_size=BATCH))
    def run_batch(batch: list[Any]) -> None:
        fire_all(url, token, batch, figures)

    run_batch()
    check_threads_free(url, token, figures)
    return figures


def _assert_clean(figures: Figures) -> None:
    print(figures.line())
    assert figures.sent >= BATCH * BATCHES
    assert figures.server_errors == [], figures.server_errors[:3]
    assert figures.unterminated == [], figures.unterminated[:3]
    assert figures.busy_threads == []


def test_fuzzed_bodies_on_sqlite(server, tmp_path):
    # An empty workspace: the demo model's glob finds nothing, so a run takes two model calls, not three.
    with override_settings(AGUI_HEARTBEAT_SECONDS=3600, AGENT_WORKSPACE=tmp_path):
        figures = _fuzz(server.url, server.token)
    server.drain()
    from threads.models import Run

    assert not Run.objects.filter(status__in=[Run.Status.RUNNING, Run.Status.WAITING]).exists()
    _assert_clean(figures)


STUCK = (
    "SELECT t.agui_thread_id, r.agui_run_id, r.status, r.outcome, r.owner, r.lease_expires_at "
    "FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id WHERE r.status IN ('running', 'waiting') "
    "UNION ALL SELECT t.agui_thread_id, q.agui_run_id, 'queued', q.error, '', q.queued_at "
    "FROM threads_queuedmessage q JOIN threads_thread t ON t.id = q.thread_id WHERE q.status = 'queued'"
)


@pytest.mark.services
def test_fuzzed_bodies_on_postgresql(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    import psycopg

    database_url = request.getfixturevalue("postgres_url")
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    env = {"DATABASE_URL": database_url, "AGUI_HEARTBEAT_SECONDS": "3600"}
    proc = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env).start()
    try:
        figures = _fuzz(proc.url, proc.token)
        if figures.busy_threads:
            # What a stuck thread looked like while the server still held it, for whoever reads the
            # failure: the open runs and the queued messages, and the end of the server's log.
            with psycopg.connect(database_url) as db:
                print("open runs and queued messages:", *db.execute(STUCK).fetchall(), sep="\n  ")
            print("the server's log, last lines:", *proc.log.read_text().splitlines()[-80:], sep="\n  ")
    finally:
        proc.stop()
    with psycopg.connect(database_url) as db:
        left = db.execute("SELECT count(*) FROM threads_run WHERE status IN ('running', 'waiting')").fetchone()
    assert left == (0,)
    _assert_clean(figures)
