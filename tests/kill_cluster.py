"""The kill loop of issue #45 (tests/runhost/test_kill_loop.py, and bench/kill_loop_cluster.py at 100
runs): three ``manage.py serve`` processes on one PostgreSQL database and Redis; runs of several model
turns, each asking for a bash call that appends to the run's own counter file; a random process
SIGKILLed every few seconds and started again; clients that follow their run through it all, each
request to a random live process (a load balancer), reattaching whenever their stream breaks.

What it finds: each client's stream (``Result.streams``), each run's counter lines, the runs' rows.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.cluster import cluster_env, fresh_database
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.procs import ServerProcess
from tests.takeover_cluster import follow_run


@dataclass
class Result:
    streams: list[bytes]
    counters: list[list[str]]  # each run's counter file, line by line
    rows: list[tuple[Any, ...]]  # (thread, status, takeovers, handovers) of every run
    kills: int
    seconds: float
    claimed: list[float] = field(default_factory=list)


def answer(n: int) -> str:
    return f"Run {n} is done."


def script(fake: FakeAnthropic, runs: int, steps: int, pace: float) -> None:
    """Run ``n``'s conversation (its first message holds ``kill-<n>:``): ``steps`` model turns, each
    a bash call appending ``k`` to counter-<n>, then the answer; a turn made again gets the same reply."""
    for n in range(runs):
        turns: list[Any] = [
            tool_turn("bash", {"command": f"echo {k} >> counter-{n}"}, id=f"toolu_{n}_{k}", preamble=[f"{k} "]).paced(
                pace
            )
            for k in range(steps)
        ]
        fake.script_by_step(f"kill-{n}:", [*turns, text_turn(["Run ", f"{n} is done."]).paced(pace)])


def kill_loop(
    root: Path, *, runs: int, steps: int, every: float, clients: int, pace: float = 0.02, seed: int = 1
) -> Result:
    """Starts the three processes, sends ``runs`` messages (``clients`` at a time), and SIGKILLs a
    random process every ``every`` seconds (then starts it again) until every client has its end."""
    chance = random.Random(seed)
    workspace = root / "ws"
    workspace.mkdir()
    with fresh_database() as database, FakeAnthropic() as fake:
        # The default lease: a SIGKILLed process of this host is known dead at once (threads/leases.py).
        env = cluster_env(fake, database, AGENT_MUTATING_TOOLS="on", RUN_LEASE_SECONDS="6")
        servers = []
        for label in ("a", "b", "c"):
            (root / label).mkdir()
            servers.append(ServerProcess(data_dir=root / label, workspace=workspace, env=dict(env)))
        script(fake, runs, steps, pace)
        live: list[ServerProcess] = []
        try:
            for server in servers:
                live.append(server.start())
            lock = threading.Lock()

            def pick() -> str:
                with lock:
                    return chance.choice(live).url

            done = threading.Event()
            kills = 0

            def killer() -> None:
                nonlocal kills
                while not done.wait(every):
                    with lock:
                        victim = chance.choice(live)
                        live.remove(victim)
                    victim.kill()
                    kills += 1
                    victim.start()
                    with lock:
                        live.append(victim)

            began = time.monotonic()
            thread = threading.Thread(target=killer, daemon=True)
            thread.start()
            token = servers[0].token
            try:
                with ThreadPoolExecutor(clients) as pool:
                    futures = [
                        pool.submit(follow_run, pick, token, "10"[n % 2], f"t-kill-{n}", f"kill-{n}: go", seconds=600)
                        for n in range(runs)
                    ]
                    streams = [future.result() for future in futures]
            finally:
                done.set()
                thread.join(120)
            seconds = time.monotonic() - began
            with psycopg.connect(database, autocommit=True) as db:
                rows = db.execute(
                    "SELECT t.agui_thread_id, r.status, r.takeovers, r.handovers FROM threads_run r "
                    "JOIN threads_thread t ON t.id = r.thread_id ORDER BY t.agui_thread_id"
                ).fetchall()
            counters = []
            for n in range(runs):
                path = workspace / f"counter-{n}"
                counters.append(path.read_text().split() if path.exists() else [])
            return Result(streams, counters, rows, kills, seconds)
        finally:
            for server in servers:
                server.kill()
