"""The two-process cluster (tests/cluster.py) for the tests of runs that cross processes; a module
that needs other settings defines its own ``_cluster``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tests.cluster import Cluster
from tests.fakes.anthropic_api import FakeAnthropic
from tests.procs import ServerProcess


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two server processes for the module (starting them is the slow part); each test gets them
    alive, with an empty workspace and a fresh script."""
    from tests.services import PG_ADMIN, REDIS_URL, _unavailable

    name = f"threadline_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    database = f"postgresql://127.0.0.1:5432/{name}"
    root = tmp_path_factory.mktemp("cluster")
    workspace = root / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "DATABASE_URL": database,
            "REDIS_URL": REDIS_URL,
            "RUN_LEASE_SECONDS": "1.5",
            "WAIT_SWEEP_SECONDS": "0.2",
        }
        servers: list[ServerProcess] = []
        try:
            for label in ("a", "b"):
                (root / label).mkdir()
                servers.append(ServerProcess(data_dir=root / label, workspace=workspace, env=dict(env)).start())
            yield Cluster(fake, servers[0], servers[1], workspace, database)
        finally:
            for server in servers:
                server.kill()
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def cluster(_cluster: Cluster, redis_url: str) -> Iterator[Cluster]:
    for server in (_cluster.a, _cluster.b):
        if server.proc is None or server.proc.poll() is not None:
            server.start()
    _cluster.fake.reset()
    for path in _cluster.workspace.iterdir():
        path.unlink()
    yield _cluster
    _cluster.a.env.pop("APPROVAL_TIMEOUT_SECONDS", None)
