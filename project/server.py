"""How ``manage.py serve`` runs uvicorn so that slow or idle clients cannot take the server down.

- An idle keep-alive connection is closed after ``SERVER_KEEP_ALIVE_SECONDS``.
- Past ``SERVER_MAX_CONNECTIONS`` connections a request gets 503 with Retry-After (``server_full``):
  connections are admitted in arrival order, and idle keep-alive ones make room for requests
  (project/admission.py). The listen backlog follows the cap, so the kernel keeps a burst for it.
- One client (an IPv4 address, an IPv6 /64) may hold ``SERVER_MAX_CONNECTIONS_PER_CLIENT`` of them:
  its idle sockets filled the cap for everyone (issue #23, item 7). A connection past it is answered
  503 with Retry-After as it is accepted, before its request is read, and closed: it costs nobody
  room, and no descriptor past that moment (issue #49, item 12: while they waited for their request,
  one address's connections made other clients' fail at the open-file limit).
- A trusted proxy's connections (``FORWARDED_ALLOW_IPS``, project/forwarded.py) are not counted per
  client as they are accepted: each request is counted, once its headers are read, under the client
  its ``X-Forwarded-For`` (or ``Forwarded``) names, until it is answered, and its scope carries that
  client. The proxy's own requests (no such header) are not capped per client (issue #42, item 4:
  a CopilotKit runtime in front held a quarter of the process).
- A request must arrive whole (headers and body) within ``SERVER_REQUEST_TIMEOUT_SECONDS`` of its
  first byte (or of the connection's opening): uvicorn has no such limit of its own, so a client
  trickling its headers or its body a byte at a time (slowloris) held a connection for ever.
- A request that arrived whole is answered from the read that brought it: its application starts
  in ``on_message_complete``, eagerly, not in the event loop's next turn as uvicorn's would. Under
  load a turn lasts tens of milliseconds, and /agui/info took no more than two of them (bench/
  stream.py --operators; issue #27 item 5). A request whose body is still coming starts at the end
  of its read, to read the body as it comes.
- At start-up the soft open-file limit is raised to the hard one (which sets the default cap), and
  a limit too low for the connection cap is reported: past it, accept() fails and the server stops
  taking anyone.
"""

from __future__ import annotations

import asyncio
import contextvars
import ipaddress
import logging
import math
import resource
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from project.admission import admission
from project.fdlimit import FILES_BESIDES_CONNECTIONS, raise_open_file_limit
from project.forwarded import TrustedProxies

log = logging.getLogger(__name__)

# What the kernel queues for a listening socket at most when /proc does not say (Linux's default).
DEFAULT_SOMAXCONN = 4096
# uvicorn's own backlog: the least a small cap keeps, so the excess of a burst is answered with its 503.
UVICORN_BACKLOG = 2048

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


# The open connections of each client in this process (one event loop: no lock needed), and the
# clients reported as holding their cap: once as they reach it, not for each connection refused, nor
# each time one of theirs closes and another takes its place (reported again once down to half).
_OPEN_PER_CLIENT: Counter[str] = Counter()
_REPORTED_AT_CAP: set[str] = set()


@cache
def trusted_proxies() -> TrustedProxies:
    return TrustedProxies(settings.FORWARDED_ALLOW_IPS)


def _retry_after() -> bytes:
    # By then an idle keep-alive connection of the client's own has been closed.
    return str(max(1, math.ceil(settings.SERVER_KEEP_ALIVE_SECONDS))).encode()


_TOO_MANY_BODY = (
    b'{"error": {"code": "too_many_connections", "message": "this client has too many open connections '
    b'(SERVER_MAX_CONNECTIONS_PER_CLIENT); close some, or retry later"}}'
)
_SERVER_FULL_BODY = (
    b'{"error": {"code": "server_full", "message": "the server holds as many connections as it may '
    b'(SERVER_MAX_CONNECTIONS); retry later"}}'
)


def _unavailable_headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"retry-after", _retry_after()),
    ]


async def too_many_from_client(scope: Any, receive: Any, send: Any) -> None:
    """The answer to a trusted proxy's request for a client past its cap."""
    await send({"type": "http.response.start", "status": 503, "headers": _unavailable_headers(_TOO_MANY_BODY)})
    await send({"type": "http.response.body", "body": _TOO_MANY_BODY})


async def server_full(scope: Any, receive: Any, send: Any) -> None:
    """The answer to a request that finds the process full (project/admission.py)."""
    await send({"type": "http.response.start", "status": 503, "headers": _unavailable_headers(_SERVER_FULL_BODY)})
    await send({"type": "http.response.body", "body": _SERVER_FULL_BODY})


def _raw_unavailable(body: bytes) -> bytes:
    """The 503 of the ASGI answers above as bytes, for what no ASGI app answers: a connection refused
    as it is accepted, and a WebSocket handshake (the WebSocket protocol would take the connection)."""
    head = b"".join(name + b": " + value + b"\r\n" for name, value in _unavailable_headers(body))
    return b"HTTP/1.1 503 Service Unavailable\r\n" + head + b"\r\n" + body


class DeadlineHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for reading each request, a cap on the
    connections of each client, and admission to the process's connection cap."""

    _deadline: asyncio.TimerHandle | None = None
    _client_key: str | None = None
    _via_proxy = False  # the peer is a trusted proxy: each request is counted under the client it names
    _client_refused = False  # the client a proxy's request names holds its cap: the request gets 503
    _reading = False  # within data_received: a request's application waits for the read to end
    _unstarted: tuple[RequestResponseCycle, Any] | None = None

    def _arm(self) -> None:
        if self._deadline is None:
            seconds = settings.SERVER_REQUEST_TIMEOUT_SECONDS
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
        if self.client is not None and trusted_proxies().trusts(self.client[0]):
            self._via_proxy = True
        elif self.client is not None and not self._count_client(self.client[0]):
            self._refuse_at_once()
            return
        admission().arrive(self)
        self._arm()

    def _refuse_at_once(self) -> None:
        """Answers a connection past its client's cap and closes it, before reading its request: the
        answer is the same whatever it asks. The 503 fits an empty socket buffer, so the socket is
        closed in the loop's next turn. A request the client has already sent is left unread, and
        the kernel may answer it with a reset; the 503 was sent before it."""
        self.transport.write(_raw_unavailable(_TOO_MANY_BODY))
        self.transport.close()

    def close_idle(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

    def _count_client(self, host: str) -> bool:
        """Counts this connection under the client at ``host``; False, counting nothing, when that
        client holds its cap already (a client past its own cap takes nobody's room)."""
        cap = settings.SERVER_MAX_CONNECTIONS_PER_CLIENT
        if not cap:
            return True
        key = client_key(host)
        if _OPEN_PER_CLIENT[key] >= cap:
            if key not in _REPORTED_AT_CAP:
                _REPORTED_AT_CAP.add(key)
                log.warning("%s holds %d connections, SERVER_MAX_CONNECTIONS_PER_CLIENT: more get 503", key, cap)
            return False
        _OPEN_PER_CLIENT[key] += 1
        self._client_key = key
        return True

    def _release_client(self) -> None:
        key, self._client_key = self._client_key, None
        if key is not None:
            _OPEN_PER_CLIENT[key] -= 1
            if _OPEN_PER_CLIENT[key] <= settings.SERVER_MAX_CONNECTIONS_PER_CLIENT // 2:
                _REPORTED_AT_CAP.discard(key)
            if _OPEN_PER_CLIENT[key] <= 0:
                del _OPEN_PER_CLIENT[key]

    def _take_forwarded_client(self) -> bool:
        """A trusted proxy's request: its scope gets the client (and the scheme) the proxy names,
        and the connection is counted under that client until the request is answered. False when
        that client holds its cap already."""
        self._release_client()  # the previous request's client: a proxy's connection serves many
        self._client_refused = False
        proxies = trusted_proxies()
        scheme = proxies.scheme(self.headers)
        if scheme is not None:
            self.scope["scheme"] = scheme
        client = proxies.client(self.headers)
        if client is None:
            return True  # the proxy's own request
        self.scope["client"] = client
        self._client_refused = not self._count_client(client[0])
        return not self._client_refused

    def data_received(self, data: bytes) -> None:
        self._reading = True
        try:
            super().data_received(data)
        finally:
            self._reading = False
        # A request whose body goes on in later reads: its application starts now, as uvicorn's
        # would have at its headers, to read the body as it comes.
        self._start_unstarted(eagerly=False)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if self._reading and self._unstarted is None:
            self._unstarted = (cycle, app)  # on_message_complete or the end of the read starts it
        else:
            super()._start_asgi_task(cycle, app)

    def _start_unstarted(self, *, eagerly: bool) -> None:
        unstarted, self._unstarted = self._unstarted, None
        if unstarted is None or self.transport.is_closing():
            return  # nobody to answer: a request read after a response that closed the connection
        cycle, app = unstarted
        if not eagerly:
            super()._start_asgi_task(cycle, app)
            return
        context = contextvars.Context() if self.config.reset_contextvars else None
        task = asyncio.Task(cycle.run_asgi(app), loop=self.loop, context=context, eager_start=True)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._unset_keepalive_if_required()  # a request read behind one answered in the same read
        admission().busy(self)
        self._arm()  # a kept-alive connection's next request: its clock starts at its first byte

    def on_headers_complete(self) -> None:
        upgrading = self.parser.should_upgrade() and self._should_upgrade()
        # Either answer closes the connection: no request of it is served after.
        if self._via_proxy and not self._take_forwarded_client():
            self.app = too_many_from_client
        elif not upgrading and not admission().request(self):
            self.app = server_full
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self._start_unstarted(eagerly=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._via_proxy:
            self._release_client()  # answered: the connection, idle in the proxy's pool, is the proxy's
        if self.timeout_keep_alive_task is not None:  # armed by uvicorn: nothing more to answer
            admission().idle(self)

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the connection is no longer an HTTP request's
        if self._client_refused or not admission().request(self):
            self.transport.write(_raw_unavailable(_TOO_MANY_BODY if self._client_refused else _SERVER_FULL_BODY))
            self.transport.close()
            return
        # Nor this protocol's to count: its end goes to the WebSocket protocol. Threadline has no
        # WebSocket route (Django's handler refuses the handshake), so that end comes at once.
        self._release_client()
        admission().leave(self)
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unstarted = None
        self._disarm()
        self._release_client()
        admission().leave(self)
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


def listen_backlog(connections: int) -> int:
    """How many connections the kernel may queue for accept(): as many as the cap, so that a burst
    of them is not dropped before the server sees it, within what the kernel allows (somaxconn)."""
    try:
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        somaxconn = DEFAULT_SOMAXCONN
    return max(1, min(max(connections, UVICORN_BACKLOG), somaxconn))


def uvicorn_options() -> dict[str, Any]:
    """uvicorn.Config's keyword arguments for the limits above. No ``limit_concurrency``: it counted
    connections not yet admitted (project/admission.py).

    ``proxy_headers`` off: the protocol reads the client a trusted proxy names, as uvicorn's
    middleware would (project/forwarded.py), when it counts the request, so that the count and the
    request's scope come from one setting, ``FORWARDED_ALLOW_IPS``, read strictly.

    ``reset_contextvars``: each request starts from a context of its own. Without it a pipelined
    request was started from the previous request's send, and (on asyncio's own loop) the request
    after one whose large body paused reading from that request's read, each in a copy of the
    previous request's context: what that request had set came with it (asgiref's thread-sensitive
    context, the locals Django keeps per request), and behind a proxy the previous request may be
    another user's. Nothing a request needs is set before it starts: the lifespan's work runs in a
    task of its own."""
    return {
        "http": DeadlineHttpToolsProtocol,
        "timeout_keep_alive": settings.SERVER_KEEP_ALIVE_SECONDS,
        "backlog": listen_backlog(settings.SERVER_MAX_CONNECTIONS),
        "reset_contextvars": True,
        "proxy_headers": False,
    }
