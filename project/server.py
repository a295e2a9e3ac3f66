"""How ``manage.py serve`` runs uvicorn so that slow or idle clients cannot take the server down.

- An idle keep-alive connection is closed after ``SERVER_KEEP_ALIVE_SECONDS``.
- Past ``SERVER_MAX_CONNECTIONS`` open connections (or requests in flight) a request gets 503.
- One client (an IPv4 address, an IPv6 /64) may hold ``SERVER_MAX_CONNECTIONS_PER_CLIENT`` of them:
  its idle sockets filled the cap for everyone (issue #23, item 7). A connection past it is not
  counted against the cap, gets 503 with Retry-After for its request, and must send that request
  within ``SERVER_KEEP_ALIVE_SECONDS``.
- A request must arrive whole (headers and body) within ``SERVER_REQUEST_TIMEOUT_SECONDS`` of its
  first byte (or of the connection's opening): uvicorn has no such limit of its own, so a client
  trickling its headers or its body a byte at a time (slowloris) held a connection for ever.
- At start-up the soft open-file limit is raised to the hard one, and a limit too low for the
  connection cap is reported: past it, accept() fails and the server stops taking anyone.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import resource
from collections import Counter
from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from project.fdlimit import raise_open_file_limit

log = logging.getLogger(__name__)

# Descriptors the process needs besides its client connections: database and Redis connections,
# the workspace's files, bash's pipes, the log.
FILES_BESIDES_CONNECTIONS = 256

_TIMEOUT_BODY = b'{"error": {"code": "request_timeout", "message": "the request took too long to arrive"}}'
_REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


def client_key(host: str) -> str:
    """What the per-client cap counts a connection from ``host`` under: an IPv4 address (also when
    it comes IPv4-mapped on a dual-stack socket), or an IPv6 /64, which one host usually holds whole."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


# The open connections of each client in this process (one event loop: no lock needed).
_OPEN_PER_CLIENT: Counter[str] = Counter()


def _retry_after() -> bytes:
    # By then an idle keep-alive connection of the client's own has been closed.
    return str(max(1, math.ceil(settings.SERVER_KEEP_ALIVE_SECONDS))).encode()


async def too_many_from_client(scope: Any, receive: Any, send: Any) -> None:
    """The answer to every request of a connection past its client's cap."""
    body = (
        b'{"error": {"code": "too_many_connections", "message": "this client has too many open connections '
        b'(SERVER_MAX_CONNECTIONS_PER_CLIENT); close some, or retry later"}}'
    )
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"retry-after", _retry_after()),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for reading each request, and a cap on the
    connections of each client."""

    _deadline: asyncio.TimerHandle | None = None
    _client_key: str | None = None
    _over_client_cap = False

    def _arm(self) -> None:
        if self._deadline is None:
            # A connection past its client's cap has only the time of an idle keep-alive to ask.
            seconds = settings.SERVER_REQUEST_TIMEOUT_SECONDS
            if self._over_client_cap:
                seconds = min(seconds, settings.SERVER_KEEP_ALIVE_SECONDS)
            self._deadline = asyncio.get_running_loop().call_later(seconds, self._request_too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete or not self.cycle.response_started:
            self.transport.write(_REQUEST_TIMEOUT)
        log.info("closed a connection from %s: its request did not arrive within the time limit", self.client)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._count_client()
        self._arm()

    def _count_client(self) -> None:
        cap = settings.SERVER_MAX_CONNECTIONS_PER_CLIENT
        if not cap or not self.client:
            return  # no cap, or a Unix socket: no address to count by
        key = self._client_key = client_key(self.client[0])
        _OPEN_PER_CLIENT[key] += 1
        if _OPEN_PER_CLIENT[key] <= cap:
            return
        self._over_client_cap = True
        # Not counted against SERVER_MAX_CONNECTIONS: a client past its own cap takes nobody's room.
        self.connections.discard(self)
        self.app = too_many_from_client
        if _OPEN_PER_CLIENT[key] == cap + 1:  # once as it goes over, not for each connection after
            log.warning("%s holds %d connections, SERVER_MAX_CONNECTIONS_PER_CLIENT: more get 503", key, cap)

    def _release_client(self) -> None:
        key, self._client_key = self._client_key, None
        if key is not None:
            _OPEN_PER_CLIENT[key] -= 1
            if _OPEN_PER_CLIENT[key] <= 0:
                del _OPEN_PER_CLIENT[key]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()  # a kept-alive connection's next request: its clock starts at its first byte

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the connection is no longer an HTTP request's
        self._release_client()  # nor this protocol's to count: its end goes to the WebSocket protocol
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._release_client()
        super().connection_lost(exc)


def raise_file_limit(connections: int) -> int:
    """Raises the open-file limit (project/fdlimit.py); warns when what it reaches is too low for
    ``connections`` client connections. Returns the soft limit in force."""
    soft = raise_open_file_limit()
    needed = connections + FILES_BESIDES_CONNECTIONS
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning(
            "the open-file limit is %d, below the %d that SERVER_MAX_CONNECTIONS=%d needs; past it the server "
            "cannot accept connections: raise the limit (ulimit -n, LimitNOFILE=) or lower SERVER_MAX_CONNECTIONS",
            soft,
            needed,
            connections,
        )
    return soft


def uvicorn_options() -> dict[str, Any]:
    """uvicorn.run's keyword arguments for the slow-client limits above."""
    return {
        "http": DeadlineHttpToolsProtocol,
        "timeout_keep_alive": settings.SERVER_KEEP_ALIVE_SECONDS,
        "limit_concurrency": settings.SERVER_MAX_CONNECTIONS,
    }
