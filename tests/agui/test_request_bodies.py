"""An AG-UI request's body is read only with the token and never past the cap: the answer
comes while the client is still sending, and the connection is closed after it."""

from __future__ import annotations

import contextlib
import socket
from urllib.parse import urlsplit

import httpx
import orjson

from tests.helpers import run_input, user
from threads.models import Thread

GIB = 1 << 30  # declared, never sent
CAP = 8 * 1024 * 1024  # AGUI_MAX_BODY_BYTES' default


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    return sock


def _head(headers: dict[str, str], path: str = "/agui/coder") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer_while_sending(sock: socket.socket, body_start: bytes) -> bytes:
    """Sends the start of a body far shorter than the one declared (or not yet ended), then waits:
    the server must answer without the rest, which never comes."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it answered and closed already
        sock.sendall(body_start)
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            data = sock.recv(65536)
            if not data:
                break
            received += data
    except ConnectionResetError:
        pass  # closed with part of our body unread: the answer came first
    return received


def _rest_until_closed(sock: socket.socket) -> bytes:
    rest = b""
    try:
        while data := sock.recv(65536):
            rest += data
    except ConnectionResetError:
        pass  # closed with our unread body in its buffer: a reset is a close too
    return rest


def test_a_huge_body_without_the_token_is_answered_401_before_it_is_read(server):
    with _connect(server.url) as sock:
        sock.sendall(_head({"Content-Type": "application/json", "Content-Length": str(GIB)}))
        answer = _answer_while_sending(sock, b" " * 131072)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
        assert b"connection: close" in answer.lower()
        _rest_until_closed(sock)  # the server closes the connection instead of reading the rest
    assert Thread.objects.count() == 0


def test_a_wrong_token_is_answered_before_the_body_too(server):
    with _connect(server.url) as sock:
        headers = {"Authorization": "Bearer wrong", "Content-Type": "application/json", "Content-Length": str(GIB)}
        sock.sendall(_head(headers))
        answer = _answer_while_sending(sock, b" " * 131072)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:200]


def test_a_declared_length_over_the_cap_is_answered_413_before_the_body(server):
    with _connect(server.url) as sock:
        headers = {"Authorization": "Bearer test-token", "Content-Type": "application/json", "Content-Length": str(GIB)}
        sock.sendall(_head(headers))
        answer = _answer_while_sending(sock, b" " * 131072)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"the limit is" in answer + _rest_until_closed(sock)


def test_a_chunked_body_is_cut_at_the_cap(server):
    with _connect(server.url) as sock:
        headers = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}
        sock.sendall(_head({**headers, "Transfer-Encoding": "chunked"}))
        chunk = b" " * 65536
        piece = b"%x\r\n%s\r\n" % (len(chunk), chunk)
        answer = _answer_while_sending(sock, piece * (CAP // len(chunk) + 2))
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert Thread.objects.count() == 0


def test_a_body_just_under_the_cap_is_read_whole(server):
    body = orjson.dumps(run_input("t-body", "r1", user("hi")))
    body += b" " * (CAP - len(body))  # JSON allows trailing whitespace
    with _connect(server.url) as sock:
        headers = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}
        sock.sendall(_head({**headers, "Content-Length": str(len(body))}) + body)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        assert b"RUN_STARTED" in answer + sock.recv(65536)
    server.drain()


def test_the_rest_of_the_site_does_not_read_a_body_declared_over_the_cap_either(server):
    with _connect(server.url) as sock:
        headers = {"Content-Type": "application/json", "Content-Length": str(GIB)}
        sock.sendall(_head(headers, "/api/approvals/x/answer"))
        answer = _answer_while_sending(sock, b" " * 131072)
        assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 401", b"HTTP/1.1 413")), answer[:200]


def test_a_bodiless_request_without_the_token_keeps_its_connection(server):
    with httpx.Client() as client:
        refused = client.get(f"{server.url}/agui/info")
        assert refused.status_code == 401
        assert refused.headers.get("connection", "") != "close"
        preflight = client.options(f"{server.url}/agui/coder", headers={"Origin": "https://x.example"})
        assert preflight.headers.get("connection", "") != "close"
