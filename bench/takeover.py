"""How long a running run waits for another process after its own dies (issue #45).

Two ``manage.py serve`` processes, A and B, on a fresh PostgreSQL database and Redis, the model faked
on loopback. Each round starts a run on A, waits until its model call is in flight, and stops A:

- ``kill``: SIGKILL. B's sweep sees at once that A's pid is gone (the same host), so the time is the
  sweep's period and the claim;
- ``freeze``: SIGSTOP, as a machine lost from the network looks: its pid lives on, so B waits for the
  lease to lapse (``RUN_LEASE_SECONDS``), then takes the run over; A is killed afterwards.

It prints, for each mode, the time from the signal to B's claim (the run's owner is B, ``takeovers``
1) and to the run's end (RUN_FINISHED in its log, with its model turn made again), p50 and p99.

    .venv/bin/python bench/takeover.py [--rounds 10] [--modes kill,freeze]
        [--lease 6] [--sweep 1]          # RUN_LEASE_SECONDS, WAIT_SWEEP_SECONDS (the defaults)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import orjson
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.anthropic_api import FakeAnthropic, text_turn  # noqa: E402
from tests.helpers import run_input, user, v1  # noqa: E402
from tests.procs import ServerProcess  # noqa: E402
from tests.services import PG_ADMIN, REDIS_URL  # noqa: E402


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _row(database: str, thread_id: str) -> tuple[str, int, str] | None:
    with psycopg.connect(database, autocommit=True) as db:
        found = db.execute(
            "SELECT r.owner, r.takeovers, r.status FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id "
            "WHERE t.agui_thread_id = %s",
            (thread_id,),
        ).fetchone()
    return None if found is None else (str(found[0]), int(found[1]), str(found[2]))


def _round(fake: FakeAnthropic, a: ServerProcess, b: ServerProcess, database: str, mode: str) -> tuple[float, float]:
    thread_id = f"t-bench-{uuid.uuid4().hex[:8]}"
    hanging = text_turn(["thinking ", "hard"]).pause(after_events=4, timeout=120)
    fake.script([hanging, text_turn(["Finished on B."])])
    body = orjson.dumps(v1(run_input(thread_id, "r1", user("go", "u1"))))
    headers = {**a.headers, "Content-Type": "application/json"}
    with httpx.stream("POST", f"{a.url}/agui/coder", content=body, headers=headers, timeout=30) as response:
        next(response.iter_raw())
    assert hanging.paused.wait(30), "the model call never came"
    assert a.proc is not None and b.proc is not None
    signalled = time.monotonic()
    if mode == "kill":
        a.kill()
    else:
        os.kill(a.proc.pid, signal.SIGSTOP)
    hanging.resume.set()
    claimed = finished = 0.0
    deadline = signalled + 120
    while time.monotonic() < deadline and not finished:
        row = _row(database, thread_id)
        now = time.monotonic()
        if row is not None and not claimed and row[1] == 1 and row[0].endswith(f":{b.proc.pid}"):
            claimed = now
        if row is not None and row[2] == "succeeded":
            finished = now
        time.sleep(0.01)
    if mode == "freeze":
        a.kill()
    a.start()
    assert claimed and finished, f"round of {mode} did not end: {_row(database, thread_id)}"
    return claimed - signalled, finished - signalled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--modes", default="kill,freeze")
    parser.add_argument("--lease", default="6")
    parser.add_argument("--sweep", default="1")
    args = parser.parse_args()
    name = f"threadline_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    database = f"postgresql://127.0.0.1:5432/{name}"
    servers: list[ServerProcess] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropic() as fake:
            root = Path(tmp)
            (root / "ws").mkdir()
            env = {
                "ANTHROPIC_API_KEY": "sk-fake",
                "ANTHROPIC_BASE_URL": fake.base_url,
                "DATABASE_URL": database,
                "REDIS_URL": REDIS_URL,
                "RUN_LEASE_SECONDS": args.lease,
                "WAIT_SWEEP_SECONDS": args.sweep,
                "LOG_LEVEL": "ERROR",
            }
            for label in ("a", "b"):
                (root / label).mkdir()
                servers.append(ServerProcess(data_dir=root / label, workspace=root / "ws", env=dict(env)).start())
            a, b = servers
            print(f"RUN_LEASE_SECONDS={args.lease} WAIT_SWEEP_SECONDS={args.sweep}, {args.rounds} rounds a mode")
            for mode in args.modes.split(","):
                claims: list[float] = []
                ends: list[float] = []
                for _ in range(args.rounds):
                    fake.reset()
                    claim, end = _round(fake, a, b, database, mode)
                    claims.append(claim)
                    ends.append(end)
                print(
                    f"{mode:>6}: taken over after p50 {statistics.median(claims):.2f} s, "
                    f"p99 {_percentile(claims, 0.99):.2f} s; finished after p50 {statistics.median(ends):.2f} s, "
                    f"p99 {_percentile(ends, 0.99):.2f} s"
                )
    finally:
        for server in servers:
            server.kill()
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
