"""Admission to a server process's connection cap (``SERVER_MAX_CONNECTIONS``), in arrival order.

A connection takes a place when it arrives, if one is free. One that arrives when the process is full
takes none, and asks again when its request arrives: someone may have left by then. When the process
is full at that moment, the connection that has waited longest with no request in flight (an idle
keep-alive) is closed to make room. Only what is still left over is refused (503, ``server_full``).

uvicorn's own ``limit_concurrency`` counted every open socket, admitted or not, when a request
arrived: a burst of connections over the cap refused every request in it, not only the excess, and a
reconnect storm after a restart locked everyone out (issue #27).

One instance per process (``admission()``); everything runs on the event loop, so nothing is locked.
"""

from __future__ import annotations

import logging
from typing import Protocol

from django.conf import settings

log = logging.getLogger(__name__)


class Connection(Protocol):
    def close_idle(self) -> None:
        """Closes the connection, which has no request in flight, to make room for another's."""


class Admission:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._placed: set[Connection] = set()
        # The placed connections with no request in flight, the longest idle first.
        self._idle: dict[Connection, None] = {}
        self._full_reported = False

    def __len__(self) -> int:
        return len(self._placed)

    def arrive(self, connection: Connection) -> bool:
        """A connection has arrived: it takes a place if one is free."""
        if len(self._placed) < self.cap:
            self._placed.add(connection)
            return True
        return False

    def request(self, connection: Connection) -> bool:
        """A request has arrived on ``connection``: whether it may be served. A connection without
        a place takes a free one, or the place of the longest idle connection, which is closed."""
        self._idle.pop(connection, None)
        if connection in self._placed:
            return True
        if len(self._placed) >= self.cap and not self._evict_idle():
            if not self._full_reported:
                self._full_reported = True
                log.warning("%d connections, SERVER_MAX_CONNECTIONS: requests past them get 503", self.cap)
            return False
        self._placed.add(connection)
        return True

    def busy(self, connection: Connection) -> None:
        """A request has begun on ``connection``: it may no longer be closed to make room."""
        self._idle.pop(connection, None)

    def idle(self, connection: Connection) -> None:
        """``connection`` has answered its requests and waits for another: it may be closed to make room."""
        if connection in self._placed:
            self._idle[connection] = None

    def leave(self, connection: Connection) -> None:
        """``connection`` is closed, or no longer this protocol's: its place is free."""
        self._idle.pop(connection, None)
        if connection in self._placed:
            self._placed.discard(connection)
            self._full_reported = False

    def _evict_idle(self) -> bool:
        if not self._idle:
            return False
        longest_idle = next(iter(self._idle))
        self.leave(longest_idle)
        longest_idle.close_idle()
        return True


_ADMISSION: Admission | None = None


def admission() -> Admission:
    """This process's admission (each worker process has its own cap)."""
    global _ADMISSION
    if _ADMISSION is None:
        _ADMISSION = Admission(settings.SERVER_MAX_CONNECTIONS)
    return _ADMISSION
