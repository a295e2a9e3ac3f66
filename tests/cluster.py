"""Two server processes on one PostgreSQL database and Redis, as deployed behind a load balancer, for
the tests of runs that cross processes: ``cluster`` (module-scoped processes, each test gets them alive
with an empty workspace and a fresh script), ``ask`` on A and ``answer_on`` either."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import FakeAnthropic
from tests.procs import ServerProcess


@dataclass
class Cluster:
    fake: FakeAnthropic
    a: ServerProcess
    b: ServerProcess
    workspace: Path
    database: str

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database, autocommit=True) as db:
            return db.execute(sql, args).fetchall()

    def run_row(self, thread_id: str) -> tuple[str, str, int, str]:
        ((row),) = self.query(
            "SELECT r.agui_run_id, r.status, r.takeovers, r.owner FROM threads_run r "
            "JOIN threads_thread t ON t.id = r.thread_id WHERE t.agui_thread_id = %s",
            thread_id,
        )
        return row  # type: ignore[no-any-return]

    def server_of(self, thread_id: str) -> ServerProcess:
        """The process that runs the thread's run now."""
        owner = self.run_row(thread_id)[3]
        pid = int(owner.rpartition(":")[2])
        return next(s for s in (self.a, self.b) if s.proc is not None and s.proc.pid == pid)


def started_cluster(tmp_path_factory: pytest.TempPathFactory, label: str, **env: str) -> Iterator[Cluster]:
    """Two server processes on a database of their own, with ``env`` besides the cluster's own
    settings; stopped and the database dropped after. For a module-scoped ``_cluster`` fixture."""
    from tests.services import PG_ADMIN, REDIS_URL, _unavailable

    name = f"threadline_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    database = f"postgresql://127.0.0.1:5432/{name}"
    root = tmp_path_factory.mktemp(label)
    workspace = root / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        settings = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "DATABASE_URL": database,
            "REDIS_URL": REDIS_URL,
            "RUN_LEASE_SECONDS": "1.5",
            "WAIT_SWEEP_SECONDS": "0.2",
            **env,
        }
        servers: list[ServerProcess] = []
        try:
            for side in ("a", "b"):
                (root / side).mkdir()
                servers.append(ServerProcess(data_dir=root / side, workspace=workspace, env=dict(settings)).start())
            yield Cluster(fake, servers[0], servers[1], workspace, database)
        finally:
            for server in servers:
                server.kill()
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def alive(cluster: Cluster) -> Cluster:
    """The cluster for the next test: both processes alive, an empty workspace, a fresh script."""
    for server in (cluster.a, cluster.b):
        if server.proc is None or server.proc.poll() is not None:
            server.start()
    cluster.fake.reset()
    for path in cluster.workspace.iterdir():
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    return cluster


def ask(cluster: Cluster, version: str, thread_id: str, text: str = "note it", **extra: Any) -> dict[str, Any]:
    (asked,) = run_client(
        version,
        f"{cluster.a.url}/agui/coder",
        cluster.a.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": text}], **extra}],
    )
    assert asked["error"] is None, asked["error"]
    assert asked["received"][-1]["type"] == "RUN_FINISHED", (asked["received"], cluster.a.log.read_text()[-3000:])
    return asked


def answer_on(server: ServerProcess, version: str, thread_id: str, asked: dict[str, Any], **step: Any) -> dict:
    """A new page (or another agent object) on another process sends the answer."""
    (answered,) = run_client(
        version,
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": asked["messages"], **step}],
    )
    assert answered["error"] is None, answered["error"]
    return answered


@contextmanager
def fresh_database() -> Iterator[str]:
    """A PostgreSQL database of its own (its URL), dropped after: for processes other than a
    two-process cluster's (``serve --workers``, three processes). Skips (or fails, with
    REQUIRE_SERVICES) without PostgreSQL."""
    from tests.services import PG_ADMIN, _unavailable

    name = f"threadline_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    try:
        yield f"postgresql://127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def cluster_env(fake: FakeAnthropic, database: str, **env: str) -> dict[str, str]:
    """What the processes of a cluster share, as ``started_cluster`` gives them: the database, Redis
    and the fake model, short leases and sweeps; ``env`` adds settings."""
    from tests.services import REDIS_URL

    return {
        "ANTHROPIC_API_KEY": "sk-fake",
        "ANTHROPIC_BASE_URL": fake.base_url,
        "DATABASE_URL": database,
        "REDIS_URL": REDIS_URL,
        "RUN_LEASE_SECONDS": "1.5",
        "WAIT_SWEEP_SECONDS": "0.2",
        **env,
    }
