"""One client's connections are capped beside everyone's (SERVER_MAX_CONNECTIONS_PER_CLIENT), on a real
server process: its idle sockets filled the connection cap for everyone (issue #23, item 7). Loopback
has a whole /8, so clients are the machine connecting from 127.0.0.x; 127.0.0.1 is a trusted proxy by
default (FORWARDED_ALLOW_IPS; tests/project/test_forwarded_clients.py), so none of them uses it."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import httpx
import orjson
import pytest

from project.server import client_key
from tests.procs import ServerProcess

EVERYONE = 20
PER_CLIENT = 5
CLIENT = "127.0.0.11"


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp_path = tmp_path_factory.mktemp("capped")
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    env = {
        "SERVER_MAX_CONNECTIONS": str(EVERYONE),
        "SERVER_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
        "SERVER_KEEP_ALIVE_SECONDS": "1",
        "SERVER_REQUEST_TIMEOUT_SECONDS": "60",  # the held sockets stay for the whole test
    }
    proc = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env).start()
    yield proc
    proc.kill()


def _idle(proc: ServerProcess, count: int, source: str = CLIENT) -> list[socket.socket]:
    """``count`` connections that send nothing."""
    return [
        socket.create_connection(("127.0.0.1", proc.port), timeout=30, source_address=(source, 0)) for _ in range(count)
    ]


def _get(proc: ServerProcess, source: str) -> httpx.Response:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=30) as client:
        return client.get(f"{proc.url}/agui/info", headers=proc.headers)


def _read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    with contextlib.suppress(ConnectionResetError):
        while data := sock.recv(65536):
            received += data
    return received


@contextlib.contextmanager
def _holding(sockets: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def test_a_client_past_its_cap_gets_503_with_retry_after_and_others_are_served(capped):
    with _holding(_idle(capped, PER_CLIENT)):
        refused = _get(capped, CLIENT)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        assert orjson.loads(refused.content)["error"]["code"] == "too_many_connections"
        assert _get(capped, "127.0.0.2").status_code == 200
    # Its sockets closed, the client is served again.
    assert _get(capped, CLIENT).status_code == 200
    assert f"{CLIENT} holds 5 connections, SERVER_MAX_CONNECTIONS_PER_CLIENT" in capped.log.read_text()


def test_a_websocket_upgrade_past_a_clients_cap_gets_the_same_503(capped):
    """The WebSocket protocol does not answer with the connection's app: the upgrade is refused before it."""
    with _holding(_idle(capped, PER_CLIENT + 1)) as held:
        upgrade = (
            b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        held[-1].sendall(upgrade)
        head, _, body = _read_until_closed(held[-1]).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and b"retry-after: 1" in head.split(b"\r\n")
        assert orjson.loads(body)["error"]["code"] == "too_many_connections"


def test_one_clients_idle_sockets_do_not_fill_the_cap_of_everyone(capped):
    """Far more idle sockets than the server's whole cap, from one client: another client is served."""
    with _holding(_idle(capped, PER_CLIENT + 2 * EVERYONE)) as held:
        assert _get(capped, "127.0.0.2").status_code == 200
        # The ones past the cap were answered as they were accepted, without a request, and closed.
        for sock in held[PER_CLIENT:]:
            head, _, body = _read_until_closed(sock).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), head[:100]
            assert orjson.loads(body)["error"]["code"] == "too_many_connections"


def test_everyones_cap_still_holds_across_clients(capped):
    with _holding(_idle(capped, PER_CLIENT) + _idle(capped, PER_CLIENT, "127.0.0.2")):
        with _holding(_idle(capped, PER_CLIENT, "127.0.0.3") + _idle(capped, PER_CLIENT, "127.0.0.4")):
            assert _get(capped, "127.0.0.5").status_code == 503  # 20 open: the server is full
        assert _get(capped, "127.0.0.5").status_code == 200


@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
    ],
)
def test_a_client_is_an_ipv4_address_or_an_ipv6_64(host, key):
    assert client_key(host) == key


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SERVER_MAX_CONNECTIONS_PER_CLIENT": "many"}, "is not an integer"),
        ({"SERVER_MAX_CONNECTIONS_PER_CLIENT": "-1"}, "below the minimum"),
        ({"SERVER_MAX_CONNECTIONS": "100", "SERVER_MAX_CONNECTIONS_PER_CLIENT": "101"}, "is above SERVER_MAX_"),
    ],
)
def test_a_bad_per_client_cap_stops_start_up_naming_it(tmp_path, env, message):
    result = ServerProcess(data_dir=tmp_path, workspace=tmp_path, env=env).manage("check")
    assert result.returncode != 0
    assert "SERVER_MAX_CONNECTIONS_PER_CLIENT" in result.stderr and message in result.stderr
