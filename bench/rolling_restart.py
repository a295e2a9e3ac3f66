"""A rolling restart under load (issue #45 item 4): ``manage.py serve --workers 4`` on PostgreSQL and
Redis, 200 streams of runs of several model turns and bash calls, and a SIGHUP once they all run: the
supervisor replaces its workers one at a time, each draining (its runs handed over at a step
boundary). It prints how many runs ended RUN_FINISHED with their answer, how many clients' streams
the real ``@ag-ui/client`` verifiers accepted, how many bash calls ran twice or not at all, how many
hand-overs and crashes the runs saw, and how long the restart took. tests/runhost/test_rolling_restart.py
runs it with 12 streams and 2 workers.

    REQUIRE_SERVICES=1 .venv/bin/python bench/rolling_restart.py [--streams 200] [--workers 4] [--steps 10]
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.cluster import cluster_env, fresh_database  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn  # noqa: E402
from tests.procs import ServerProcess  # noqa: E402
from tests.replayed import verified  # noqa: E402
from tests.sse import parse_frames  # noqa: E402
from tests.takeover_cluster import follow_run  # noqa: E402


def _workers(supervisor: int) -> set[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    found = set()
    for pid in children:
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(int(pid))
        except OSError:
            pass
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10, help="model turns with a bash call each, per run")
    parser.add_argument("--pace", type=float, default=0.1, help="seconds between a model reply's events")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="threadline-rolling-") as tmp, fresh_database() as database:
        root = Path(tmp)
        workspace = root / "ws"
        workspace.mkdir()
        with FakeAnthropic() as fake:
            for n in range(args.streams):
                turns = [
                    tool_turn("bash", {"command": f"echo {k} >> c-{n}"}, id=f"toolu_{n}_{k}").paced(args.pace)
                    for k in range(args.steps)
                ]
                fake.script_by_step(f"roll-{n}:", [*turns, text_turn([f"Run {n} is done."])])
            env = cluster_env(
                fake, database, AGENT_MUTATING_TOOLS="on", SERVER_DRAIN_SECONDS="30", RUN_LEASE_SECONDS="30"
            )
            server = ServerProcess(
                data_dir=root, workspace=workspace, env=env, serve_args=("--workers", str(args.workers))
            ).start()
            assert server.proc is not None
            try:
                before = _workers(server.proc.pid)
                with ThreadPoolExecutor(args.streams) as pool:
                    clients = [
                        pool.submit(
                            follow_run, server.url, server.token, "10"[n % 2], f"t-{n}", f"roll-{n}: go", seconds=900
                        )
                        for n in range(args.streams)
                    ]
                    with psycopg.connect(database, autocommit=True) as db:
                        while db.execute("SELECT count(*) FROM threads_run").fetchone() != (args.streams,):
                            time.sleep(0.2)
                        began = time.monotonic()
                        server.proc.send_signal(signal.SIGHUP)
                        while _workers(server.proc.pid) & before or len(_workers(server.proc.pid)) < args.workers:
                            time.sleep(0.2)
                        restart = time.monotonic() - began
                        running = db.execute("SELECT count(*) FROM threads_run WHERE status = 'running'").fetchone()
                    streams = [client.result() for client in clients]
                with psycopg.connect(database, autocommit=True) as db:
                    rows = db.execute("SELECT status, takeovers, handovers FROM threads_run").fetchall()
            finally:
                server.kill()
        finished = accepted = answered = twice = missing = 0
        for n, body in enumerate(streams):
            types = [frame.event["type"] for frame in parse_frames(body)[0]]
            finished += types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED"
            client = verified("10"[n % 2], body, thread_id=f"t-{n}", run_id="r1")
            accepted += client["error"] is None
            texts = [m.get("content") or "" for m in client["messages"] if m["role"] == "assistant"]
            answered += bool(texts) and texts[-1].endswith(f"Run {n} is done.")
            path = workspace / f"c-{n}"
            lines = path.read_text().split() if path.exists() else []
            twice += len(lines) - len(set(lines))
            missing += args.steps - len(set(lines))
    print(f"serve --workers {args.workers}, {args.streams} streams of {args.steps} bash steps, SIGHUP once all run")
    print(
        f"  restart:                    {restart:.1f} s for {args.workers} workers; {running[0]} runs at work after it"
    )
    print(f"  runs RUN_FINISHED:          {finished} of {args.streams}")
    print(f"  with their answer:          {answered} of {args.streams}")
    print(f"  streams the verifiers pass: {accepted} of {args.streams} (1.0.0 and 0.0.59, alternately)")
    print(f"  runs' rows succeeded:       {sum(row[0] == 'succeeded' for row in rows)} of {len(rows)}")
    print(f"  hand-overs:                 {sum(row[2] for row in rows)}; crashes: {sum(r[1] - r[2] for r in rows)}")
    print(f"  bash calls run twice:       {twice}; not run: {missing}")
    ok = finished == answered == accepted == args.streams and twice == missing == 0
    print("  verdict:                    " + ("no run ended in error" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
