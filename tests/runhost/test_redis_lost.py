"""Redis lost while runs stream on two processes (PostgreSQL and a Redis of the test's own, which it
stops): a follower on the other process still gets the whole run and its end, read from the log,
and a message queued there is taken, not reported as failed (issue #49 item 8)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, text_turn
from tests.helpers import eventually, run_input, user, v1
from tests.procs import ServerProcess, free_port
from tests.sse import get_stream, post_run

pytestmark = pytest.mark.services
WORDS = [f"word{i} " for i in range(60)]


@pytest.fixture
def redis() -> Iterator[subprocess.Popen[bytes]]:
    """A Redis server of this test's own, so stopping it harms no other test."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    proc.port = port  # type: ignore[attr-defined]

    def answers() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    eventually(answers, what="the test's Redis to listen")
    yield proc
    proc.kill()
    proc.wait(10)


@pytest.fixture
def two_servers(
    tmp_path: Path, postgres_url: str, redis: Any
) -> Iterator[tuple[FakeAnthropic, ServerProcess, ServerProcess]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "DATABASE_URL": postgres_url,
            "REDIS_URL": f"redis://127.0.0.1:{redis.port}/0",
        }
        servers = []
        try:
            for label in ("a", "b"):
                (tmp_path / label).mkdir()
                servers.append(ServerProcess(data_dir=tmp_path / label, workspace=workspace, env=dict(env)).start())
            yield fake, servers[0], servers[1]
        finally:
            for server in servers:
                server.kill()


def _run_on(server: ServerProcess, thread_id: str, results: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        results["first"] = post_run(
            server.url, "coder", v1(run_input(thread_id, "r1", user("go", "u1"))), token=server.token
        )

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_follower_on_another_process_gets_the_whole_run_when_redis_is_lost(two_servers, redis):
    fake, a, b = two_servers
    fake.script([text_turn(WORDS).paced(0.03)])
    results: dict[str, Any] = {}
    running = _run_on(a, "t-redis-lost", results)
    eventually(lambda: fake.requests, what="the run to call the model")
    followed: dict[str, Any] = {}

    def follow() -> None:
        followed["stream"] = get_stream(
            f"{b.url}/agui/coder/threads/t-redis-lost/runs/r1/events", token=b.token, timeout=60
        )

    follower = threading.Thread(target=follow)
    follower.start()
    time.sleep(0.5)
    redis.kill()  # mid-stream: the follower loses its live batches
    running.join(60)
    follower.join(60)
    stream = followed["stream"]
    assert stream.types[-1] == "RUN_FINISHED", stream.types[-5:]
    text = "".join(e["delta"] for e in stream.events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "".join(WORDS)
    assert results["first"].types[-1] == "RUN_FINISHED"


def test_a_message_queued_on_another_process_after_redis_is_lost_is_taken_not_failed(two_servers, redis):
    fake, a, b = two_servers
    fake.script([text_turn(WORDS).paced(0.03), text_turn(["Second answer."])])
    results: dict[str, Any] = {}
    running = _run_on(a, "t-redis-queued", results)
    eventually(lambda: fake.requests, what="the run to call the model")
    redis.kill()
    second = post_run(
        b.url,
        "coder",
        v1(run_input("t-redis-queued", "r2", user("go", "u1"), user("and then?", "u2"))),
        token=b.token,
        timeout=60,
    )
    running.join(60)
    assert [e.get("code") for e in second.events if e["type"] == "RUN_ERROR"] == []
    assert second.types[-1] == "RUN_FINISHED", second.types[-5:]
    assert "Second answer." in "".join(e["delta"] for e in second.events if e["type"] == "TEXT_MESSAGE_CONTENT")
