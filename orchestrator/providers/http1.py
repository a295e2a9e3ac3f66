"""The model API's HTTP/1.1: an httpx transport on asyncio's protocols, parsed by httptools.

At a model's pace each token is a network read of its own, and under the SDK's httpx client each
read went up through httpcore's connection and h11's Python state machine: nine generator and
context-manager steps, a ``Data`` event and a chunked-framing parse per token, about a third of
the server's CPU per token (bench/paced.py --profile, issue #50). Here a connection is an
``asyncio.Protocol`` whose bytes go straight into llhttp (httptools, the parser uvicorn serves
with), which calls back with each piece of the body already unframed; the body stream hands over
what arrived since the last read in one step. The SDK and httpx above are unchanged: the SDK
builds, authenticates and retries its requests, httpx routes them (a proxy in the environment
keeps httpcore's pool, see ``model_http_client``) and hands this transport only direct ones.

It keeps httpx's transport contract: ``ConnectTimeout``, ``ConnectError``, ``WriteTimeout``,
``WriteError``, ``ReadTimeout``, ``ReadError``, ``RemoteProtocolError`` (a reply cut short or
malformed) and ``PoolTimeout``, with the ``connect``, ``write``, ``read`` and ``pool`` timeouts a
request carries. Connections are kept alive and reused per origin within the client's ``Limits``;
one whose reply was not read to its end, or that the server said it would close, is closed.
"""

# httpx hands the transport its timeouts; the waits below honour them.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httptools
import httpx2
from httpcore2._types import SOCKET_OPTION

from orchestrator.providers.asyncio_network import HAPPY_EYEBALLS_DELAY, WatchedProtocol, on_asyncio_network

Origin = tuple[str, str, int]  # scheme, host, port

_DEFAULT_PORTS = {"http": 80, "https": 443}


class _Connection(WatchedProtocol):
    """One keep-alive connection, its reply being read (``reply``) or idle in the pool."""

    def __init__(self, pool: Http1Transport, origin: Origin) -> None:
        super().__init__()
        self.pool = pool
        self.origin = origin
        self.parser: httptools.HttpResponseParser | None = None  # None while idle
        self.idle_since = 0.0
        self.closed = False  # the connection is gone, or going
        self.error: Exception | None = None  # why it ended, when it ended badly
        self._reset()

    def read_timeout(self) -> Exception:
        return httpx2.ReadTimeout("the model API sent nothing in time")

    def write_timeout(self) -> Exception:
        return httpx2.WriteTimeout("the model API took no more of the request in time")

    def _reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.informational = False  # a 1xx reply, which the final one follows
        self.head_done = False
        self.keep_alive = False
        self.framed = False  # a length or chunks say where the body ends (not the connection's close)
        self.body: list[bytes] = []
        self.complete = False

    # -- the reply, as llhttp parses it

    def reply(self) -> None:
        """Ready to read the reply of the request about to be written."""
        self._reset()
        self.parser = httptools.HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.headers = []
        self.reason = b""
        self.framed = False

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        status = self.parser.get_status_code()
        if status < 200:
            self.informational = True  # 100 Continue and such: the reply is still to come
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self._received(len(body))

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            return
        self.complete = True
        self._wake()

    # -- the socket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.pool._open.add(self)  # counted from here: connection_lost may come before the connect returns

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None or self.complete:
            # Bytes nobody asked for (on an idle connection, or after the reply): it cannot be reused.
            self._end(httpx2.RemoteProtocolError("the server sent data nobody asked for"))
            return
        try:
            parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._end(httpx2.RemoteProtocolError(f"the model API's reply is malformed: {exc}"))

    def eof_received(self) -> bool:
        if self.head_done and not self.complete and not self.framed:
            self.complete = True  # a body that ends with the connection: here it ended
            self.keep_alive = False
        elif self.parser is not None and not self.complete:
            self._end(httpx2.RemoteProtocolError("the server closed the connection before its reply ended"))
            return False
        self._end(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.error is None:
            self.error = httpx2.ReadError(str(exc) or type(exc).__name__)
        self.closed = True
        self._stopped()
        self.pool._gone(self)

    def _end(self, error: Exception | None) -> None:
        if error is not None and self.error is None:
            self.error = error
        self.closed = True
        self._wake()
        if self.transport is not None:
            self.transport.close()

    def close(self) -> None:
        self._end(None)

    # -- what the transport asks of it

    async def write(self, data: bytes, timeout: float | None) -> None:
        if self.closed or self.transport is None or self.transport.is_closing():
            raise httpx2.WriteError(str(self.error or "the connection is closed"))
        self.transport.write(data)
        await self.drained_within(timeout)
        if self.closed:
            raise httpx2.WriteError(str(self.error or "the connection closed while the request was written"))

    async def wait(self, timeout: float | None) -> None:
        """Until something more of the reply arrives, or the connection ends (ReadTimeout past ``timeout``)."""
        if self.closed:
            raise self.error or httpx2.RemoteProtocolError("the server closed the connection before its reply ended")
        await self.waited(timeout)

    def take(self) -> bytes:
        body = self.body
        data = body[0] if len(body) == 1 else b"".join(body)
        self.body = []
        self._taken(0, 0)
        return data

    def reusable(self, loop: asyncio.AbstractEventLoop, now: float, expiry: float | None) -> bool:
        return (
            not self.closed
            and self.loop is loop
            and (expiry is None or now - self.idle_since < expiry)
            and self.transport is not None
            and not self.transport.is_closing()
        )


class _Body(httpx2.AsyncByteStream):
    """A reply's body, as it arrives: each step hands over all that came since the last."""

    def __init__(self, pool: Http1Transport, connection: _Connection, timeout: float | None) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
        self._timeout = timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        timeout = self._timeout
        while True:
            if connection.body:
                yield connection.take()
            elif connection.complete:
                self._release()
                return
            else:
                await connection.wait(timeout)

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool._release(connection)

    async def aclose(self) -> None:
        self._release()


class Http1Transport(httpx2.AsyncBaseTransport):
    """Direct HTTP/1.1 connections to the model API, kept alive per origin (see the module)."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None,
        limits: httpx2.Limits,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._max_connections = limits.max_connections
        self._max_idle = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._socket_options = list(socket_options or ())
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._opening = 0
        self._room: deque[asyncio.Future[None]] = deque()  # requests waiting for a connection's room

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx2.UnsupportedProtocol(f"the model API's URL must be http or https, not {scheme!r}")
        origin = (scheme, url.host, url.port or _DEFAULT_PORTS[scheme])
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        connection = await self._connection(origin, timeouts, request.extensions.get("sni_hostname"))
        try:
            connection.reply()
            await self._send(connection, request, timeouts.get("write"))
            read_timeout = timeouts.get("read")
            while not connection.head_done:
                await connection.wait(read_timeout)
        except BaseException:
            connection.close()
            raise
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1", "reason_phrase": connection.reason}
        if request.method == "HEAD":
            # llhttp cannot be told a reply has no body: the connection is not reused.
            connection.close()
            return httpx2.Response(connection.status, headers=connection.headers, extensions=extensions)
        body = _Body(self, connection, read_timeout)
        return httpx2.Response(connection.status, headers=connection.headers, stream=body, extensions=extensions)

    async def _send(self, connection: _Connection, request: httpx2.Request, timeout: float | None) -> None:
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
        chunked = False
        for name, value in request.headers.raw:
            head.append(b"%s: %s\r\n" % (name, value))
            if name.lower() == b"transfer-encoding" and value.lower() == b"chunked":
                chunked = True
        head.append(b"\r\n")
        try:
            content = request.content  # the SDK's JSON, read already
        except httpx2.RequestNotRead:
            await connection.write(b"".join(head), timeout)
            async for part in request.stream:  # type: ignore[union-attr]
                if part:
                    await connection.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part, timeout)
            if chunked:
                await connection.write(b"0\r\n\r\n", timeout)
            return
        await connection.write(b"".join(head) + content, timeout)

    # -- the pool

    async def _connection(self, origin: Origin, timeouts: dict[str, float | None], sni: str | None) -> _Connection:
        loop = asyncio.get_running_loop()
        limit = self._max_connections
        try:
            async with asyncio.timeout(timeouts.get("pool")):
                while True:
                    idle = self._idle.get(origin)
                    now = loop.time()
                    while idle:
                        connection = idle.pop()  # the most recently used first: the likeliest to be alive
                        if connection.reusable(loop, now, self._expiry):
                            return connection
                        connection.close()
                    if limit is None or len(self._open) + self._opening < limit:
                        break
                    if self._close_an_idle_one():  # another origin's: room for this one
                        continue
                    await self._wait_for_room(loop)
        except TimeoutError:
            raise httpx2.PoolTimeout(f"all {limit} connections to the model API stayed busy") from None
        self._opening += 1
        try:
            connection = await self._connect(loop, origin, timeouts.get("connect"), sni)
        finally:
            self._opening -= 1
            self._wake_one()
        return connection

    async def _wait_for_room(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until a connection is released or closed."""
        waiter = loop.create_future()
        self._room.append(waiter)
        try:
            await waiter
        finally:
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._room.remove(waiter)

    def _close_an_idle_one(self) -> bool:
        for idle in self._idle.values():
            if idle:
                connection = idle.popleft()  # the longest idle
                self._open.discard(connection)
                connection.close()
                return True
        return False

    def _wake_one(self) -> None:
        while self._room:
            waiter = self._room.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(
        self, loop: asyncio.AbstractEventLoop, origin: Origin, timeout: float | None, sni: str | None
    ) -> _Connection:
        scheme, host, port = origin
        tls = self._ssl_context if scheme == "https" else None
        options: dict[str, Any] = {}
        if tls is not None:
            options = {"ssl": tls, "server_hostname": sni or host}
        if isinstance(loop, asyncio.BaseEventLoop):
            options["happy_eyeballs_delay"] = HAPPY_EYEBALLS_DELAY  # a host's addresses side by side
        try:
            async with asyncio.timeout(timeout):
                transport, connection = await loop.create_connection(
                    lambda: _Connection(self, origin), host, port, **options
                )
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"the model API at {host}:{port} did not answer in time") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx2.ConnectError(str(exc) or type(exc).__name__) from exc
        sock: socket.socket | None = transport.get_extra_info("socket")
        if sock is not None:
            for option in self._socket_options:
                sock.setsockopt(*option)
        return connection

    def _release(self, connection: _Connection) -> None:
        """A reply is done with its connection: kept for the next request when it can be."""
        idle_count = sum(len(idle) for idle in self._idle.values())
        if (
            not connection.complete
            or not connection.keep_alive
            or connection.closed
            or (self._max_idle is not None and idle_count >= self._max_idle)
        ):
            connection.close()
            return
        connection.parser = None
        now = connection.idle_since = connection.loop.time()
        idle = self._idle.setdefault(connection.origin, deque())
        expiry = self._expiry
        while idle and expiry is not None and now - idle[0].idle_since >= expiry:
            idle.popleft().close()  # idle past the keep-alive expiry: not kept open for nothing
        idle.append(connection)
        self._wake_one()

    def _gone(self, connection: _Connection) -> None:
        self._open.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle is not None:
            with contextlib.suppress(ValueError):
                idle.remove(connection)
        self._wake_one()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        for connection in list(self._open):
            connection.close()


def model_http_client(client: httpx2.AsyncClient) -> httpx2.AsyncClient:
    """``client`` (the SDK's default, with its limits, certificates and socket options) with its
    direct connections on ``Http1Transport``, and any proxy's (a mount from the environment's
    ``HTTPS_PROXY``) through httpcore on asyncio's network.

    httpx offers no argument for a transport built from its defaults, so the default transport's
    pool is read here: tests/agents/test_model_transport.py checks the SDK's client still has one."""
    pool = getattr(client._transport, "_pool", None)
    if pool is None or not hasattr(pool, "_ssl_context"):
        raise TypeError(f"{type(client._transport).__name__} has no connection pool to read its settings from")
    on_asyncio_network(client)  # the proxies' pools (and the default's, replaced below)
    if pool._uds is None and pool._local_address is None:
        limits = httpx2.Limits(
            max_connections=None if pool._max_connections >= 2**62 else pool._max_connections,
            max_keepalive_connections=pool._max_keepalive_connections,
            keepalive_expiry=pool._keepalive_expiry,
        )
        client._transport = Http1Transport(
            ssl_context=pool._ssl_context, limits=limits, socket_options=pool._socket_options
        )
    return client
