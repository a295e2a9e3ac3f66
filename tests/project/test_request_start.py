"""When the server (project/server.py ``DeadlineHttpToolsProtocol``) starts a request's application.

A request that arrived whole is answered from the read that brought it: its application starts
there, not a turn of the event loop later, which under load was as long as /agui/info took
(bench/stream.py --operators; issue #27 item 5). A request whose body is still coming starts at
the end of its read, to read the body as it comes. These run uvicorn with the server's protocol,
in a thread of the test, and an application that notes where it was started from.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn

from project.server import uvicorn_options
from tests.procs import free_port


@dataclass
class Started:
    path: str
    from_the_read: bool  # started within the protocol's data_received


@dataclass
class Recorder:
    started: list[Started] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        frame = sys._getframe()
        callers = set()
        while frame is not None:
            callers.add(frame.f_code.co_name)
            frame = frame.f_back
        self.started.append(Started(scope["path"], "data_received" in callers))
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if scope["path"] == "/slow":
            await asyncio.sleep(2)
        answer = b"%s %d" % (scope["path"].encode(), len(body))
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(answer))]
        if scope["path"] == "/last":
            headers.append((b"connection", b"close"))  # as a 503 server_full does
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture
def served(settings: Any) -> Iterator[tuple[Recorder, int]]:
    settings.SERVER_KEEP_ALIVE_SECONDS = 1
    recorder = Recorder()
    port = free_port()
    config = uvicorn.Config(
        recorder, host="127.0.0.1", port=port, lifespan="off", log_level="warning", **uvicorn_options()
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    yield recorder, port
    server.should_exit = True
    thread.join(30)


def _exchange(port: int, data: bytes, answers: int) -> bytes:
    """Sends ``data`` at once and reads until ``answers`` responses (or the connection's close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        received = b""
        while received.count(b"HTTP/1.1 ") < answers or not received.endswith(tuple(_bodies(received))):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def _bodies(received: bytes) -> list[bytes]:
    return [part.rsplit(b"\r\n\r\n", 1)[-1] for part in received.split(b"HTTP/1.1 ")[1:]] or [b"\x00"]


def test_a_request_that_arrived_whole_is_answered_from_the_read_that_brought_it(served):
    recorder, port = served
    got = _exchange(port, b"GET /info HTTP/1.1\r\nHost: t\r\n\r\n", 1)
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"/info 0")
    posted = b"POST /runs HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
    got = _exchange(port, posted, 1)
    assert got.endswith(b"/runs 5")
    assert recorder.started == [Started("/info", True), Started("/runs", True)]


def test_a_body_still_coming_is_read_as_it_comes(served):
    recorder, port = served
    size = 4 * 1024 * 1024  # past uvicorn's high-water mark: reading pauses until the application reads
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
        deadline = time.monotonic() + 30
        while not recorder.started:  # the application is reading before the body is sent
            assert time.monotonic() < deadline, "the application did not start before its body came"
            time.sleep(0.01)
        sock.sendall(b"x" * size)
        received = b""
        while not received.endswith(b"/upload %d" % size):
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    assert recorder.started == [Started("/upload", False)]


def test_a_request_read_behind_an_answered_one_is_not_cut_off_by_the_keep_alive_timeout(served):
    recorder, port = served
    # Both in one read: the first is answered within it, and arms the keep-alive timeout (1 s here)
    # as a connection with nothing more to answer would; the second takes 2 s.
    got = _exchange(port, b"GET /first HTTP/1.1\r\nHost: t\r\n\r\nGET /slow HTTP/1.1\r\nHost: t\r\n\r\n", 2)
    assert got.count(b"HTTP/1.1 200") == 2 and got.endswith(b"/slow 0"), got
    assert [started.path for started in recorder.started] == ["/first", "/slow"]


def test_a_request_read_behind_a_response_that_closed_the_connection_is_not_served(served):
    recorder, port = served
    data = b"GET /last HTTP/1.1\r\nHost: t\r\n\r\nGET /after HTTP/1.1\r\nHost: t\r\n\r\n"
    got = _exchange(port, data, 2)
    assert got.count(b"HTTP/1.1 ") == 1 and got.endswith(b"/last 0"), got
    time.sleep(0.2)
    assert [started.path for started in recorder.started] == ["/last"]
