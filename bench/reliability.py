"""Reliability under hostile input: 10,000 generated RunAgentInput bodies against a real server.

    .venv/bin/python bench/reliability.py                      # SQLite, 10,000 bodies
    .venv/bin/python bench/reliability.py --database-url postgresql://127.0.0.1:5432/test_fuzz
    .venv/bin/python bench/reliability.py --bodies 2000 --seed 7 --workers 8

The bodies are those of tests/agui/test_fuzz_input.py (tests/fuzz_bodies.py: deep nesting, NUL, huge
and malformed ids, wrong types, unknown interrupts and tool results), drawn at random (``--seed``
makes a run repeatable) and sent ``--workers`` at a time, so bodies on one thread race. The server
is ``manage.py serve`` with the offline demo model, in a fresh data dir (and, with
``--database-url``, a database that this script creates and drops). It prints the figures:
answers by status, answers >= 500, SSE streams that ended without RUN_FINISHED/RUN_ERROR, and
threads left busy afterwards (a pool thread that does not take a new message, a run left running
or waiting); and it saves the offending bodies next to the report. Exit status 1 if any is non-zero.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fuzz_bodies import Figures, bodies, check_threads_free, fire_all  # noqa: E402
from tests.procs import ServerProcess  # noqa: E402

BATCH = 50
LEFT_BUSY = "SELECT count(*) FROM threads_run WHERE status IN ('running', 'waiting')"


def _fuzz(url: str, token: str, total: int, workers: int, run_seed: int) -> Figures:
    figures = Figures()
    started = time.monotonic()

    @seed(run_seed)
    @settings(
        max_examples=max(1, total // BATCH),
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(batch=st.lists(bodies, min_size=BATCH, max_size=BATCH))
    def run_batch(batch: list[object]) -> None:
        fire_all(url, token, batch, figures, workers=workers)
        if figures.sent % 1000 < BATCH:
            print(f"  {figures.sent:>6} sent, {time.monotonic() - started:6.1f} s: {figures.line()}", flush=True)

    run_batch()
    check_threads_free(url, token, figures)
    return figures


def _left_busy(database_url: str, data_dir: Path) -> int:
    if database_url:
        import psycopg

        with psycopg.connect(database_url) as db:
            row = db.execute(LEFT_BUSY).fetchone()
    else:
        with sqlite3.connect(data_dir / "threadline.sqlite3") as db:
            row = db.execute(LEFT_BUSY).fetchone()
    return int(row[0]) if row else 0


def _with_database(admin_url: str) -> tuple[str, str]:
    """A fresh database next to ``admin_url``'s: (its URL, its name)."""
    import psycopg

    name = f"threadline_reliability_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{name}")), name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--seed", type=int, default=random.randrange(1 << 30))
    parser.add_argument("--database-url", default="", help="a PostgreSQL server to create a scratch database on")
    args = parser.parse_args()

    database_url, database_name = _with_database(args.database_url) if args.database_url else ("", "")
    with tempfile.TemporaryDirectory(prefix="threadline-reliability-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        (root / "ws").mkdir()
        (root / "ws" / "README.md").write_text("# A workspace for the reliability run\n")
        env = {"AGUI_HEARTBEAT_SECONDS": "3600"}  # so a stalled stream shows as a read timeout
        if database_url:
            env["DATABASE_URL"] = database_url
        server = ServerProcess(data_dir=root / "data", workspace=root / "ws", env=env)
        print(
            f"Reliability: {args.bodies} bodies, seed {args.seed}, {args.workers} at a time, on "
            f"{'PostgreSQL' if database_url else 'SQLite'}; starting the server...",
            flush=True,
        )
        server.start()
        started = time.monotonic()
        try:
            figures = _fuzz(server.url, server.token, args.bodies, args.workers, args.seed)
        finally:
            server.stop()
        elapsed = time.monotonic() - started
        left = _left_busy(database_url, root / "data")
        report = Path(tempfile.gettempdir()) / f"threadline-reliability-{args.seed}"
        report.mkdir(exist_ok=True)
        for kind, found in (("server-error", figures.server_errors), ("unterminated", figures.unterminated)):
            for index, body in enumerate(found):
                (report / f"{kind}-{index}.json").write_bytes(body)
    if database_name:
        import psycopg

        with psycopg.connect(args.database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database_name}" WITH (FORCE)')

    print()
    print(f"  bodies sent:                          {figures.sent} in {elapsed:.0f} s")
    print(f"  answers by status:                    {dict(sorted(figures.statuses.items()))}")
    print(f"  SSE streams:                          {figures.streams}")
    print(f"  answers >= 500:                       {len(figures.server_errors)}")
    print(f"  streams without a terminal event:     {len(figures.unterminated)}")
    print(f"  pool threads refusing a new message:  {len(figures.busy_threads)}")
    print(f"  runs left running or waiting:         {left}")
    for line in figures.busy_threads[:10]:
        print(f"    {line}")
    if figures.server_errors or figures.unterminated:
        print(f"  offending bodies saved in {report}")
    bad = len(figures.server_errors) + len(figures.unterminated) + len(figures.busy_threads) + left
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
