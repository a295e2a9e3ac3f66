"""Two server processes on one PostgreSQL database and Redis, as deployed behind a load balancer, for
the tests of runs that cross processes: ``cluster`` (module-scoped processes, each test gets them alive
with an empty workspace and a fresh script), ``ask`` on A and ``answer_on`` either."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

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
