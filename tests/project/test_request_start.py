"""When the server (project/server.py ``DeadlineHttpToolsProtocol``) starts a request's application,
and from what context.

A request that arrived whole is answered from the read that brought it: its application starts
there, not a turn of the event loop later, which under load was as long as /agui/info took
(bench/stream.py --operators; issue #27 item 5). A request whose body is still coming starts at
the end of its read, to read the body as it comes. Each starts from a context of its own, not the
previous request's. These run uvicorn with the server's options, in a thread of the test, and an
application that notes where it was started from.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
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


@contextlib.contextmanager
def _serving(app: Any, loop: str = "auto") -> Iterator[int]:
    """``app`` served by uvicorn with the server's options, in a thread; yields its port. ``auto`` is
    the loop ``manage.py serve`` runs (uvloop where it is installed)."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, lifespan="off", log_level="warning", loop=loop, **uvicorn_options()
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture
def served(settings: Any) -> Iterator[tuple[Recorder, int]]:
    settings.SERVER_KEEP_ALIVE_SECONDS = 1
    recorder = Recorder()
    with _serving(recorder) as port:
        yield recorder, port


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


# Set by a request's application as it starts; what the next request on the connection starts with.
_MARK: contextvars.ContextVar[str] = contextvars.ContextVar("test_request_mark", default="")


async def _marking(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the mark its request started with ("-" for none), and leaves its path as the mark."""
    assert scope["type"] == "http"
    inherited = _MARK.get()
    _MARK.set(scope["path"])
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await asyncio.sleep(0.2)  # the next request, sent meanwhile, waits behind this one
    answer = inherited.encode() or b"-"
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """The bodies of the next ``count`` responses (each with a content-length, as _marking's)."""
    received, bodies = b"", []
    while len(bodies) < count:
        head, sep, rest = received.partition(b"\r\n\r\n")
        lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"content-length")]
        length = lengths[0] if lengths else None
        if sep and length is not None and len(rest) >= length:
            assert head.startswith(b"HTTP/1.1 200"), head
            bodies.append(rest[:length])
            received = rest[length:]
            continue
        chunk = sock.recv(65536)
        assert chunk, received
        received += chunk
    return bodies


@pytest.mark.parametrize(
    "loop,size,pipelined",
    [
        ("auto", 5, True),  # serve's loop: the next request is started from this one's send
        ("asyncio", 4 * 1024 * 1024, False),  # past the high-water mark: reading resumes from this one
    ],
    ids=["pipelined", "after-a-large-body"],
)
def test_a_request_starts_from_a_context_of_its_own_not_the_previous_requests(loop, size, pipelined):
    """Each request starts from a fresh context (uvicorn's reset_contextvars). A pipelined request
    was started from the previous request's send, in a copy of its context; on asyncio's own loop
    so was the next request after one whose large body paused reading, since the read callback
    registered again as that body was read runs in a copy of that request's context. Whatever the
    first request had set (asgiref's thread-sensitive context, the locals Django keeps per request)
    came with it into the next, which behind a proxy may be another user's."""
    first = b"POST /first HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (size, b"x" * size)
    second = b"GET /second HTTP/1.1\r\nHost: t\r\n\r\n"
    with _serving(_marking, loop) as port, socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        if pipelined:
            sock.sendall(first + second)
            answers = _answers(sock, 2)
        else:
            sock.sendall(first)
            answers = _answers(sock, 1)
            sock.sendall(second)
            answers += _answers(sock, 1)
    assert answers == [b"-", b"-"]
