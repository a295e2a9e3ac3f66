"""A user's request bodies in flight have a total cap (issue #49, item 3): any ordinary user's API
token made the server hold an 8 MiB body per connection (+820 MB with 100 slow uploads). Past
AGUI_MAX_BODY_BYTES_PER_USER a new body of that user is answered 503 with Retry-After before a byte
of it is read, on every route, while another user is still served."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import orjson
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.authtoken.models import Token

from agui import inflight
from tests.helpers import run_input, user

CAP = 8 * 1024 * 1024  # AGUI_MAX_BODY_BYTES' default
PER_USER = 2 * CAP


def _person(name: str) -> tuple[str, str]:
    """A user's API token, and the sender the server counts their bodies for."""
    person = User.objects.create_user(name)
    return Token.objects.create(user=person).key, f"user:{person.pk}"


def _head(headers: dict[str, str], path: str = "/agui/coder") -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@contextlib.contextmanager
def slow_upload(url: str, key: str, path: str = "/agui/coder") -> Iterator[socket.socket]:
    """A POST that declares a body at the cap and sends only its first 64 KiB, then waits."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        headers = {"Authorization": f"Token {key}", "Content-Type": "application/json", "Content-Length": str(CAP)}
        sock.sendall(_head(headers, path) + b" " * 65536)
        yield sock


def _answer(sock: socket.socket) -> bytes:
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while data := sock.recv(65536):
            received += data
    return received


def _until_held(sender: str, size: int) -> None:
    deadline = time.monotonic() + 10
    while inflight.held_by(sender) != size:
        assert time.monotonic() < deadline, f"{sender} holds {inflight.held_by(sender)}, not {size}"
        time.sleep(0.01)


def _run(server, key: str, thread: str) -> httpx.Response:
    body = orjson.dumps(run_input(thread, "r1", user("hi")))
    headers = {"Authorization": f"Token {key}", "Content-Type": "application/json"}
    with httpx.stream("POST", f"{server.url}/agui/coder", content=body, headers=headers, timeout=30) as response:
        response.read()
    return response


@override_settings(AGUI_MAX_BODY_BYTES_PER_USER=PER_USER)
def test_a_users_slow_uploads_past_their_cap_are_refused_unread_while_another_user_is_served(server):
    alice, alices = _person("alice")
    bob, _ = _person("bob")
    with slow_upload(server.url, alice), slow_upload(server.url, alice):
        _until_held(alices, PER_USER)
        with slow_upload(server.url, alice) as third:
            answer = _answer(third)  # the server answers and closes without the rest of the body
        assert answer.startswith(b"HTTP/1.1 503"), answer[:300]
        head = answer.lower()
        assert b"retry-after: 2" in head and b"connection: close" in head
        assert b"AGUI_MAX_BODY_BYTES_PER_USER" in answer
        # Bob is served while Alice's uploads hang.
        served = _run(server, bob, "t-bob")
        assert served.status_code == 200 and b"RUN_STARTED" in served.content
        # Her bodies count on the rest of the site too (the REST API's one write).
        with slow_upload(server.url, alice, "/api/approvals/x/answer") as api:
            refused = _answer(api)
        assert refused.startswith(b"HTTP/1.1 503") and b"retry-after" in refused.lower(), refused[:300]
    # Her uploads gone, what they held is given back, and she is served again.
    _until_held(alices, 0)
    assert _run(server, alice, "t-alice").status_code == 200
    server.drain()


@override_settings(AGUI_MAX_BODY_BYTES_PER_USER=PER_USER)
def test_the_shared_token_is_one_sender_too(server):
    with slow_upload(server.url, "test-token"), slow_upload(server.url, "test-token"):
        _until_held("shared", PER_USER)
        with slow_upload(server.url, "test-token") as third:
            assert _answer(third).startswith(b"HTTP/1.1 503")
