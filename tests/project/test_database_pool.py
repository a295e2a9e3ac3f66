"""On PostgreSQL a server process lends its admin's and API's requests connections from a pool
(project/settings.py DATABASE_POOL_SIZE) instead of opening one for each request, and a pooled
connection that PostgreSQL dropped is replaced, not handed to a request."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.procs import ServerProcess, _descendants

PG_ADMIN = "postgresql://127.0.0.1:5432/postgres"

_MAKE_TOKEN = """
import uuid
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
user = get_user_model().objects.create_superuser(f"operator-{uuid.uuid4().hex[:8]}", "op@example.invalid", None)
print(Token.objects.create(user=user).key)
"""


def _database(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _sessions(database: str) -> int:
    """How many connections PostgreSQL has had to ``database`` so far, once every one has ended
    (a session's statistics are flushed when it ends)."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        deadline = time.monotonic() + 30
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone() != (0,):
            assert time.monotonic() < deadline, "the server's connections did not end"
            time.sleep(0.1)
        row = admin.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", (database,)).fetchone()
    assert row is not None
    return int(row[0])


def _server(tmp_path: Path, database_url: str, pool_size: str) -> tuple[ServerProcess, dict[str, str]]:
    for name in ("data", "ws"):
        (tmp_path / name).mkdir(parents=True)
    proc = ServerProcess(
        data_dir=tmp_path / "data",
        workspace=tmp_path / "ws",
        env={"DATABASE_URL": database_url, "DATABASE_POOL_SIZE": pool_size},
    )
    proc.start()
    made = proc.manage("shell", "-c", _MAKE_TOKEN)
    assert made.returncode == 0, made.stderr
    return proc, {"Authorization": f"Token {made.stdout.strip().splitlines()[-1]}"}


def _connections_for_requests(tmp_path: Path, database_url: str, pool_size: str, requests: int) -> int:
    """The connections a server process made in its life, serving ``requests`` API and admin
    requests besides starting and stopping."""
    before = _sessions(_database(database_url))
    proc, headers = _server(tmp_path, database_url, pool_size)
    try:
        with httpx.Client(base_url=proc.url, headers=headers, timeout=10) as client:
            for index in range(requests):
                path = "/api/threads/" if index % 2 else "/api/approvals/"
                assert client.get(path).status_code == 200, path
    finally:
        proc.stop()
    return _sessions(_database(database_url)) - before


@pytest.mark.services
def test_a_process_lends_its_requests_pooled_connections(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    database_url = request.getfixturevalue("postgres_url")
    pooled = _connections_for_requests(tmp_path / "pooled", database_url, "4", requests=60)
    # Migrating, the system checks, the start-up banner and the token's shell take a few of their
    # own; the pool keeps at most four.
    assert pooled <= 15, f"{pooled} connections for 60 requests with a pool"
    # Without the pool every request opens and closes one: the count above can tell the two apart.
    unpooled = _connections_for_requests(tmp_path / "unpooled", database_url, "0", requests=60)
    assert unpooled >= 60, f"{unpooled} connections for 60 requests without a pool"


@pytest.mark.services
def test_a_pooled_connection_postgresql_dropped_is_not_lent(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    database_url = request.getfixturevalue("postgres_url")
    proc, headers = _server(tmp_path, database_url, "4")
    try:
        with httpx.Client(base_url=proc.url, headers=headers, timeout=10) as client:
            for _ in range(4):
                assert client.get("/api/threads/").status_code == 200
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                dropped = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
                    (_database(database_url),),
                ).fetchone()
            assert dropped is not None and dropped[0] >= 1
            # Each request would otherwise be lent a dead connection from the pool: a 500.
            for _ in range(8):
                response = client.get("/api/threads/")
                assert response.status_code == 200, response.text[:300]
    finally:
        proc.kill()


def test_a_pool_of_one_is_refused_naming_the_setting(tmp_path: Path) -> None:
    proc = ServerProcess(
        data_dir=tmp_path,
        workspace=tmp_path,
        env={"DATABASE_URL": "postgresql://127.0.0.1:5432/none", "DATABASE_POOL_SIZE": "1"},
    )
    result = proc.manage("check")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "DATABASE_POOL_SIZE" in result.stderr


def _postgres_connections(pid: int) -> int:
    """The TCP connections to port 5432 that process ``pid`` holds open (Linux's /proc)."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            sockets.add(target[len("socket:[") : -1])
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port, state, inode = fields[2].rsplit(":", 1)[1], fields[3], fields[9]
            held += inode in sockets and remote_port == "1538" and state == "01"  # 5432, ESTABLISHED
    return held


@pytest.mark.services
def test_the_supervisor_of_several_workers_keeps_no_connection(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """``serve --workers 2`` reads the agents for its banner, then only supervises: the pool it read
    them with (two connections kept open) would stay open, unused, for the server's life."""
    env = {"DATABASE_URL": request.getfixturevalue("postgres_url"), "REDIS_URL": request.getfixturevalue("redis_url")}
    for name in ("data", "ws"):
        (tmp_path / name).mkdir()
    proc = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env, serve_args=("--workers", "2"))
    proc.start()
    try:
        assert proc.proc is not None
        time.sleep(2)  # a pool opens its connections in the background
        workers = _descendants(proc.proc.pid)
        assert workers and sum(_postgres_connections(pid) for pid in workers) >= 1  # what the count can see
        assert _postgres_connections(proc.proc.pid) == 0
    finally:
        proc.kill()
