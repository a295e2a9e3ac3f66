"""The model API's connections through a proxy on asyncio's own transports, under httpcore.

Direct connections to the model API go through orchestrator/providers/http1.py. A proxy in the
environment (``HTTPS_PROXY``) gets a pool of httpcore's from the SDK's httpx client, whose default
network backend is anyio's: at a model's pace every token is a read of its own, and anyio's read
costs it a cancel scope for the timeout, two context managers, an ``asyncio.Event`` and a
``resume_reading`` and ``pause_reading`` of the socket (two ``epoll_ctl`` calls): about a fifth of
the server's CPU per token (bench/paced.py --profile, issue #50). Here a protocol keeps reading
into a buffer (paused only past a high-water mark) and a read waits on one future with one timer.
httpx, httpcore's connection pool and h11 are the SDK's, unchanged: only the bytes under them
travel otherwise.

Each stream keeps httpcore's contract: ``ReadTimeout``, ``WriteTimeout`` and ``ConnectTimeout``
when a timeout passes, ``ReadError``, ``WriteError`` and ``ConnectError`` when the connection
fails, and ``b""`` from a read once the peer has closed.
"""

# httpcore's network interface hands each call its timeout, so these async functions take one.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Coroutine, Iterable
from typing import Any

import httpcore2
import httpx2
from httpcore2 import AsyncNetworkBackend, AsyncNetworkStream
from httpcore2._types import SOCKET_OPTION

# A peer that sends faster than its reader reads is paused past this much buffered, and resumed
# once the reader has taken it: memory stays bounded as with anyio's pause after each read.
HIGH_WATER = 256 * 1024
# As anyio's connect_tcp: the next address of a host is tried if one has not answered in this long.
HAPPY_EYEBALLS_DELAY = 0.25


class WatchedProtocol(asyncio.Protocol):
    """What both transports' connections keep of the socket (this module's and http1.py's): what
    was received, counted against a high-water mark past which reading pauses; one read waiting at
    a time, its deadline watched by one timer; and a write waiting for the send buffer to drain.
    Each raises its own library's timeouts (``read_timeout``, ``write_timeout``)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.size = 0  # bytes received and not yet taken
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None  # a read waiting for something to arrive
        # The waiting read's deadline, watched by one timer moved only when it fires: a timer set
        # and cancelled per read cost 1.7 µs a token on uvloop.
        self.deadline = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.drained: asyncio.Future[None] | None = None  # a write waiting for the buffer to drain

    def read_timeout(self) -> Exception:
        raise NotImplementedError

    def write_timeout(self) -> Exception:
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def pause_writing(self) -> None:
        if self.drained is None:
            self.drained = self.loop.create_future()

    def resume_writing(self) -> None:
        self._drain_done()

    def _received(self, size: int) -> None:
        """``size`` more bytes wait to be taken: reading pauses past the high-water mark."""
        self.size += size
        if self.size > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def _taken(self, left: int, resume_at: int) -> None:
        """What waits is now ``left`` bytes: reading resumes once that is at most ``resume_at``."""
        self.size = left
        if self.paused and left <= resume_at and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def _stopped(self) -> None:
        """The connection is gone: what waits on it is woken, its timer dropped."""
        self._wake()
        self._drain_done()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def waited(self, timeout: float | None) -> None:
        """Until something arrives or the connection ends; ``read_timeout()`` past ``timeout``."""
        waiter = self.waiter = self.loop.create_future()
        if timeout is not None:
            self.deadline = deadline = self.loop.time() + timeout
            timer = self.timer
            if timer is None or timer.when() > deadline:
                if timer is not None:
                    timer.cancel()
                self.timer = self.loop.call_at(deadline, self._check_deadline)
        try:
            await waiter
        finally:
            self.waiter = None

    async def drained_within(self, timeout: float | None) -> None:
        """Until the send buffer has room again (at once when it has); ``write_timeout()`` past ``timeout``."""
        drained = self.drained
        if drained is None:
            return
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(drained)
        except TimeoutError:
            raise self.write_timeout() from None

    def _check_deadline(self) -> None:
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done():
            return  # no read waits: the next one sets the timer again
        if self.loop.time() >= self.deadline:
            waiter.set_exception(self.read_timeout())
        else:
            self.timer = self.loop.call_at(self.deadline, self._check_deadline)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _drain_done(self) -> None:
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)


class _Reading(WatchedProtocol):
    """What a connection received and how it ended, for ``AsyncioStream``."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[bytes] = []
        self.ended = False  # the peer closed, or the connection was lost
        self.error: Exception | None = None

    def read_timeout(self) -> Exception:
        return httpcore2.ReadTimeout()

    def write_timeout(self) -> Exception:
        return httpcore2.WriteTimeout()

    def data_received(self, data: bytes) -> None:
        self.received.append(data)
        self._received(len(data))

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # the transport closes itself: an HTTP/1.1 peer that stopped sending is done

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._stopped()

    def take(self, max_bytes: int) -> bytes:
        received = self.received
        data = received[0] if len(received) == 1 else b"".join(received)
        if len(data) > max_bytes:
            data, rest = data[:max_bytes], data[max_bytes:]
            self.received = [rest]
            self._taken(len(rest), HIGH_WATER // 4)
        else:
            self.received = []
            self._taken(0, HIGH_WATER // 4)
        return data


class AsyncioStream(AsyncNetworkStream):
    """One connection to the model API, read as it arrives."""

    def __init__(self, transport: asyncio.Transport, reading: _Reading) -> None:
        self._transport = transport
        self._reading = reading

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        reading = self._reading
        if not reading.received:
            if reading.ended:
                if reading.error is not None:
                    raise httpcore2.ReadError(reading.error)
                return b""
            await reading.waited(timeout)
            if not reading.received:
                if reading.error is not None:
                    raise httpcore2.ReadError(reading.error)
                return b""
        return reading.take(max_bytes)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        reading = self._reading
        if reading.ended or self._transport.is_closing():
            raise httpcore2.WriteError(reading.error or "the connection is closed")
        self._transport.write(buffer)
        await reading.drained_within(timeout)
        if reading.error is not None:
            raise httpcore2.WriteError(reading.error)

    async def aclose(self) -> None:
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                transport = await self._reading.loop.start_tls(
                    self._transport, self._reading, ssl_context, server_hostname=server_hostname
                )
        except TimeoutError:
            self._transport.close()
            raise httpcore2.ConnectTimeout() from None
        except (OSError, ssl.SSLError) as exc:
            self._transport.close()
            raise httpcore2.ConnectError(exc) from exc
        if transport is None:
            raise httpcore2.ConnectError("the connection closed during the TLS handshake")
        # From here the protocol hears the TLS transport: reading is paused and resumed on it.
        self._reading.transport = transport
        return AsyncioStream(transport, self._reading)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._transport.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info == "socket":
            return self._transport.get_extra_info("socket")
        if info == "is_readable":
            # Asked of an idle connection before it is reused: anything received since, or its
            # end, means the server closed it (httpcore then opens another).
            return bool(self._reading.received) or self._reading.ended
        return None


class AsyncioNetworkBackend(AsyncNetworkBackend):
    """httpcore's network backend on asyncio's transports (see the module's docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        return await _opened(_connect(asyncio.get_running_loop(), host, port, local_address), timeout, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> AsyncNetworkStream:
        connecting = asyncio.get_running_loop().create_unix_connection(_Reading, path)
        return await _opened(connecting, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def _connect(
    loop: asyncio.AbstractEventLoop, host: str, port: int, local_address: str | None
) -> Coroutine[Any, Any, tuple[asyncio.Transport, _Reading]]:
    local_addr = (local_address, 0) if local_address else None
    if isinstance(loop, asyncio.BaseEventLoop):
        # A host's addresses tried side by side, as anyio did.
        delay = HAPPY_EYEBALLS_DELAY
        return loop.create_connection(_Reading, host, port, local_addr=local_addr, happy_eyeballs_delay=delay)
    # uvloop's has no such argument: it tries them in turn.
    return loop.create_connection(_Reading, host, port, local_addr=local_addr)


async def _opened(
    connecting: Coroutine[Any, Any, tuple[asyncio.Transport, _Reading]],
    timeout: float | None,
    socket_options: Iterable[SOCKET_OPTION] | None,
) -> AsyncioStream:
    """The stream of a connection being made, within ``timeout``, with httpcore's errors."""
    try:
        async with asyncio.timeout(timeout):
            transport, reading = await connecting
    except TimeoutError:
        raise httpcore2.ConnectTimeout() from None
    except OSError as exc:
        raise httpcore2.ConnectError(exc) from exc
    _set_options(transport, socket_options)
    return AsyncioStream(transport, reading)


def _set_options(transport: asyncio.Transport, options: Iterable[SOCKET_OPTION] | None) -> None:
    sock: socket.socket | None = transport.get_extra_info("socket")
    if sock is None:
        return
    for option in options or ():
        sock.setsockopt(*option)


def on_asyncio_network(client: httpx2.AsyncClient) -> httpx2.AsyncClient:
    """``client`` (the SDK's default, with its limits, proxies and socket options) with every
    connection pool it holds reaching the network through ``AsyncioNetworkBackend``.

    httpx offers no argument for the backend under its transport, so each pool's is set here: a
    pool reads it whenever it opens a connection. tests/agents/test_model_transport.py checks that
    the SDK's client still has such pools, so an httpx that renames them fails there, not in use."""
    backend = AsyncioNetworkBackend()
    for transport in (client._transport, *client._mounts.values()):
        if transport is None:
            continue  # a host NO_PROXY names: reached by the default transport
        pool = getattr(transport, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):
            raise TypeError(f"{type(transport).__name__} has no connection pool to put on asyncio's network")
        pool._network_backend = backend
    return client
