"""A server whose run is held open by its model, and the raw requests the connection caps' tests send
it (tests/project/test_connection_burst.py, tests/project/test_forwarded_clients.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType

import httpx
import orjson

from tests.burst import Answer, Burst, open_burst
from tests.fakes.anthropic_api import FakeAnthropic, Turn, text_turn
from tests.helpers import run_input, user, v1
from tests.procs import ServerProcess

SETUP = "127.0.0.254"  # the source address of the requests that set a test up, counted under no test's client
THREAD, RUN = "t-held", "r1"


@contextlib.contextmanager
def held_server(tmp_path: Path, fake: FakeAnthropic, env: dict[str, str]) -> Iterator[tuple[ServerProcess, Turn]]:
    """A server whose run ``RUN`` is held by its model (paused, until the turn's ``resume`` is set): each
    reattach stream to it stays open. The run's own POST is closed; the run goes on without it."""
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, **env}
    server = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env).start()
    held = text_turn(["held ", "open"]).pause(after_events=4, timeout=600)
    fake.script([held])
    try:
        body = orjson.dumps(v1(run_input(THREAD, RUN, user("hold on"))))
        with httpx.Client(transport=httpx.HTTPTransport(local_address=SETUP), timeout=30) as client:
            headers = {**server.headers, "Content-Type": "application/json"}
            with client.stream("POST", f"{server.url}/agui/coder", content=body, headers=headers) as response:
                assert response.status_code == 200
                assert held.paused.wait(30)
        yield server, held
    finally:
        held.resume.set()
        server.kill()


def _lines(headers: Mapping[str, str]) -> str:
    return "".join(f"{name}: {value}\r\n" for name, value in headers.items())


def reattach(server: ServerProcess, headers: Mapping[str, str] = MappingProxyType({})) -> bytes:
    """A stream held open as long as the run, with ``headers`` besides its own."""
    return (
        f"GET /agui/coder/threads/{THREAD}/runs/{RUN}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {server.token}\r\nAccept: text/event-stream\r\n{_lines(headers)}\r\n"
    ).encode()


def info(server: ServerProcess, headers: Mapping[str, str] = MappingProxyType({})) -> bytes:
    """A request answered at once, after which its connection is kept alive, idle."""
    return (
        f"GET /agui/info HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.token}\r\n{_lines(headers)}\r\n"
    ).encode()


def websocket_upgrade() -> bytes:
    return (
        b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )


async def burst(server: ServerProcess, requests: list[bytes], sources: list[str]) -> tuple[Burst, list[Answer]]:
    """The burst's answers once every status line has come, and every 503 whole."""
    opened, answers = await open_burst(server.port, requests, sources)
    await opened.read_refusals()
    return opened, answers


def assert_refused(answer: Answer, code: str) -> None:
    assert answer.status == 503
    assert int(answer.headers["retry-after"]) >= 1
    assert answer.headers["connection"] == "close"
    assert answer.error_code == code, answer.body[:200]
