"""Server processes on one PostgreSQL database and Redis, as deployed behind a load balancer: the
fake Messages API, a database of their own, a shared workspace. The cross-process tests (waiting runs,
takeovers) start them once a module and revive them for each test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.fakes.anthropic_api import FakeAnthropic
from tests.procs import ServerProcess
from tests.services import PG_ADMIN, REDIS_URL, _unavailable


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
        """The thread's one run: its AG-UI id, status, takeovers and owning process."""
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

    def revived(self) -> Cluster:
        """Both processes alive (a test may have killed one), a fresh script and an empty workspace."""
        for server in (self.a, self.b):
            if server.proc is None or server.proc.poll() is not None:
                server.start()
        self.fake.reset()
        for path in self.workspace.iterdir():
            path.unlink()
        return self


@contextmanager
def two_servers(root: Path, **env: str) -> Iterator[Cluster]:
    """Two ``manage.py serve`` processes under ``root`` on a database made for them (dropped after),
    with short leases and sweeps; ``env`` adds settings. Skips (or fails, with REQUIRE_SERVICES)
    without PostgreSQL."""
    name = f"threadline_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    database = f"postgresql://127.0.0.1:5432/{name}"
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
            for label in ("a", "b"):
                (root / label).mkdir()
                servers.append(ServerProcess(data_dir=root / label, workspace=workspace, env=dict(settings)).start())
            yield Cluster(fake, servers[0], servers[1], workspace, database)
        finally:
            for server in servers:
                server.kill()
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
