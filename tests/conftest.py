from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from django.test import override_settings

from agents.workspaces import hand_over
from tests.services import PG_ADMIN, REDIS_URL, _unavailable


@dataclass
class LiveServer:
    """The real ASGI application served by uvicorn on a loopback port, in a thread of this process."""

    url: str
    loop: asyncio.AbstractEventLoop
    token: str = "test-token"

    def drain(self, timeout: float = 30) -> None:
        """Waits until every run the server owns has finished and been recorded."""
        from runhost.host import HOST

        asyncio.run_coroutine_threadsafe(HOST.drain(), self.loop).result(timeout)

    def call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


async def _call(func: Any, *args: Any) -> Any:
    """Runs ``func`` on the server's event loop (it may need the running loop)."""
    return func(*args)


@pytest.fixture(scope="session")
def live_server_thread() -> Iterator[LiveServer]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config("project.asgi:application", lifespan="on", log_level="warning")
    server = uvicorn.Server(config)
    loops: list[asyncio.AbstractEventLoop] = []

    def serve() -> None:
        loop = asyncio.new_event_loop()
        loops.append(loop)
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve(sockets=[sock]))
        loop.close()

    thread = threading.Thread(target=serve, name="uvicorn", daemon=True)
    thread.start()
    for _ in range(3000):
        if server.started:
            break
        threading.Event().wait(0.01)
    assert server.started, "the test server did not start"
    from project.asgi import stop_keeping_fresh
    from runhost.host import HOST

    # The sweep of waiting runs reads the database: it runs only while a test has one (``server``).
    asyncio.run_coroutine_threadsafe(_call(HOST.stop_sweeper), loops[0]).result(10)
    # So do the lifespan's re-reads of the agents and the MCP configuration, every 2 seconds, into
    # the process-wide caches that tests of their own set up and time (they are read on demand).
    asyncio.run_coroutine_threadsafe(_call(stop_keeping_fresh), loops[0]).result(10)
    yield LiveServer(url=f"http://127.0.0.1:{port}", loop=loops[0])
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def coder(transactional_db: None) -> Any:
    from agents.models import Agent

    agent, _ = Agent.objects.get_or_create(name="coder", defaults={"system_prompt": "You are a test agent."})
    return agent


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "README.md").write_text("# Demo project\n\nA small project for tests.\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("def main():\n    return 'hello'\n")
    with override_settings(AGENT_WORKSPACE=root, AGENT_WORKSPACES_ROOT=tmp_path / "workspaces"):
        hand_over(root)  # as every run's workspace is: the sandbox's user may write it
        yield root


@pytest.fixture
def server(live_server_thread: LiveServer, coder: Any, workspace: Path) -> Iterator[LiveServer]:
    """The server with the demo model, a workspace and the coder agent. After the test, runs get
    a moment to finish (one still waiting for an approval is cancelled), as at a server's shutdown."""
    from agui.runs import background_surface
    from runhost.host import HOST

    live_server_thread.call(_call(HOST.start_sweeper, background_surface))
    yield live_server_thread
    live_server_thread.call(_call(HOST.stop_sweeper))
    live_server_thread.call(HOST.drain(), timeout=60)


@pytest.fixture
def fake_api() -> Iterator[Any]:
    """A loopback fake of the Anthropic Messages API; the server's provider points at it."""
    from tests.fakes.anthropic_api import FakeAnthropic

    with FakeAnthropic() as fake, override_settings(ANTHROPIC_API_KEY="sk-test-fake", ANTHROPIC_BASE_URL=fake.base_url):
        yield fake


@pytest.fixture
def operator(client: Any, db: None) -> Any:
    """A logged-in superuser's test client, for the admin's pages."""
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_superuser("operator", "op@example.com", None))
    return client


# PostgreSQL and Redis for the tests that run as several processes do (tests/services.py).
@pytest.fixture
def postgres_url() -> Iterator[str]:
    import psycopg

    name = f"threadline_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://127.0.0.1:5432/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url() -> str:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            assert sock.recv(16).startswith(b"+PONG")
    except (OSError, AssertionError) as exc:
        _unavailable("Redis at 127.0.0.1:6379", exc)
    return REDIS_URL
