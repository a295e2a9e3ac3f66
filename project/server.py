"""How ``manage.py serve`` runs uvicorn so that slow or idle clients cannot take the server down.

- An idle keep-alive connection is closed after ``SERVER_KEEP_ALIVE_SECONDS``.
- Past ``SERVER_MAX_CONNECTIONS`` open connections (or requests in flight) a request gets 503.
- A request must arrive whole (headers and body) within ``SERVER_REQUEST_TIMEOUT_SECONDS`` of its
  first byte (or of the connection's opening): uvicorn has no such limit of its own, so a client
  trickling its headers or its body a byte at a time (slowloris) held a connection for ever.
- At start-up the soft open-file limit is raised to the hard one, and a limit too low for the
  connection cap is reported: past it, accept() fails and the server stops taking anyone.
"""

from __future__ import annotations

import asyncio
import logging
import resource
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


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for reading each request."""

    _deadline: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = asyncio.get_running_loop().call_later(
                settings.SERVER_REQUEST_TIMEOUT_SECONDS, self._request_too_slow
            )

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
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()  # a kept-alive connection's next request: its clock starts at its first byte

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the connection is no longer an HTTP request's
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
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
