"""Clients behind a trusted proxy are told apart by the header the proxy adds (issue #42, item 4), and a
connection past its client's cap is refused as it is accepted (issue #49, item 12), on a real
``manage.py serve``.

Loopback has a whole /8: 127.0.0.1 is the trusted proxy (FORWARDED_ALLOW_IPS's default: loopback's
127.0.0.1 and ::1), and 127.0.0.x others are clients that connect directly, none of them trusted. The
clients a proxy names are documentation addresses (203.0.113.0/24). Every stream here is a reattach
stream to a run held by its model, so each holds its connection."""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.burst import Answer
from tests.fakes.anthropic_api import FakeAnthropic
from tests.held import assert_refused, burst, held_server, info, reattach
from tests.procs import ServerProcess

PROXY = "127.0.0.1"
PER_CLIENT = 3
ENV = {
    "SERVER_MAX_CONNECTIONS": "60",
    "SERVER_MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
    # An idle connection is kept for the whole test: what closes one here is its refusal, not a timer.
    "SERVER_KEEP_ALIVE_SECONDS": "600",
    "SERVER_REQUEST_TIMEOUT_SECONDS": "600",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with FakeAnthropic() as fake, held_server(tmp_path_factory.mktemp("forwarded"), fake, ENV) as (server, _):
        yield server


def _by_client(clients: list[str], answers: list[Answer]) -> dict[str, Counter[int]]:
    statuses: dict[str, Counter[int]] = {}
    for client, answer in zip(clients, answers, strict=True):
        statuses.setdefault(client, Counter())[answer.status] += 1
    return statuses


@pytest.mark.parametrize(
    ("header", "first"),
    [
        pytest.param(lambda client: {"X-Forwarded-For": client}, 1, id="x-forwarded-for"),
        pytest.param(lambda client: {"Forwarded": f'for="{client}";proto=https'}, 11, id="forwarded"),
    ],
)
async def test_each_client_a_trusted_proxy_names_has_a_cap_of_its_own(server, header, first):
    """Without it every stream counted under the proxy's address: three served, the rest refused."""
    clients = [f"203.0.113.{first + n}" for n in range(4) for _ in range(PER_CLIENT + 1)]
    opened, answers = await burst(server, [reattach(server, header(c)) for c in clients], [PROXY] * len(clients))
    try:
        for client, statuses in _by_client(clients, answers).items():
            assert statuses == Counter({200: PER_CLIENT, 503: 1}), client
        for answer in opened.refused():
            assert_refused(answer, "too_many_connections")
        # The proxy's own request is served beside them.
        own, own_answers = await burst(server, [info(server)], [PROXY])
        await own.close()
        assert own_answers[0].status == 200
    finally:
        await opened.close()
    log = server.log.read_text()
    assert f"203.0.113.{first} holds 3 connections, SERVER_MAX_CONNECTIONS_PER_CLIENT" in log
    assert f'203.0.113.{first}:0 - "GET /agui/coder/threads/' in log  # the request's client, as the access log shows


async def test_the_client_is_the_rightmost_address_the_trusted_proxies_did_not_add(server):
    """A client may send an X-Forwarded-For of its own; the proxy appends the address it saw, and only that
    counts: the client cannot spread its streams over names it made up, nor spend another's."""
    made_up = [{"X-Forwarded-For": f"198.51.100.{n}, 203.0.113.7"} for n in range(PER_CLIENT + 2)]
    # The hop before the server is a trusted proxy too (loopback): the client is the one before it.
    chained = [{"X-Forwarded-For": f"203.0.113.8, {PROXY}"} for _ in range(PER_CLIENT + 1)]
    requests = [reattach(server, headers) for headers in made_up + chained]
    opened, answers = await burst(server, requests, [PROXY] * len(requests))
    try:
        assert Counter(answer.status for answer in answers[: len(made_up)]) == Counter({200: PER_CLIENT, 503: 2})
        assert Counter(answer.status for answer in answers[len(made_up) :]) == Counter({200: PER_CLIENT, 503: 1})
    finally:
        await opened.close()


async def test_an_untrusted_peers_forwarded_header_is_ignored(server):
    """A client that connects directly cannot pass itself off as several by naming them."""
    spoofed = [{"X-Forwarded-For": f"203.0.113.{n}"} for n in range(20, 26)]
    requests = [reattach(server, headers) for headers in spoofed]
    opened, _ = await burst(server, requests, ["127.0.0.21"] * len(requests))
    try:
        assert opened.statuses() == Counter({200: PER_CLIENT, 503: 3})
        for answer in opened.refused():
            assert_refused(answer, "too_many_connections")
    finally:
        await opened.close()


async def test_a_trusted_proxys_own_connections_are_not_capped_per_client(server):
    count = 4 * PER_CLIENT
    opened, _ = await burst(server, [reattach(server)] * count, [PROXY] * count)
    try:
        assert opened.statuses() == Counter({200: count})
    finally:
        await opened.close()


def _open_files(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while data := sock.recv(65536):
        received += data
    return received


def test_connections_past_a_clients_cap_are_answered_and_closed_before_they_send_anything(server):
    """They held a descriptor each until their request came or their time ran out: one address made
    other clients' requests fail at the open-file limit. Now each costs the server its accept."""
    assert server.proc is not None
    before = _open_files(server.proc.pid)
    address = ("127.0.0.1", server.port)
    held = [socket.create_connection(address, timeout=30, source_address=("127.0.0.22", 0)) for _ in range(PER_CLIENT)]
    past = [socket.create_connection(address, timeout=30, source_address=("127.0.0.22", 0)) for _ in range(50)]
    try:
        for sock in past:  # none sends a byte: the 503 comes without a request, and the end after it
            head, _, body = _read_until_closed(sock).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503 "), head[:100]
            assert b"connection: close" in head.split(b"\r\n") and b"retry-after: 600" in head.split(b"\r\n")
            assert orjson.loads(body)["error"]["code"] == "too_many_connections"
        # The server holds the connections within the cap, and none of the fifty past it (the
        # margin is for the files a server opens on its own: a database connection, a log).
        assert _open_files(server.proc.pid) <= before + PER_CLIENT + 3
    finally:
        for sock in held + past:
            sock.close()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("10.0.0.1/8", "'10.0.0.1/8' is not an IP address or network"),
        ("proxy.internal", "'proxy.internal' is not an IP address or network"),
        ("10.0.0.1,,10.0.0.2", "'' is not an IP address or network"),
        ("300.1.2.3", "'300.1.2.3' is not an IP address or network"),
        ("*,10.0.0.1", "'*' trusts every peer and goes alone"),
    ],
)
def test_a_bad_forwarded_allow_ips_stops_start_up_naming_it(tmp_path, value, message):
    result = ServerProcess(data_dir=tmp_path, workspace=tmp_path, env={"FORWARDED_ALLOW_IPS": value}).manage("check")
    assert result.returncode != 0
    assert f"FORWARDED_ALLOW_IPS={value!r}" in result.stderr and message in result.stderr, result.stderr[-500:]
