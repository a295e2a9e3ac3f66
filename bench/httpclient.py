"""The benchmark's HTTP/1.1 client: a raw asyncio protocol that timestamps each response.

It records, per response, when the request was sent, when the first byte and the
first SSE ``data:`` frame arrived, and when the last byte arrived. The read path
does as little as possible (an append and an ``endswith`` per read) so that the
client is not what limits the rate; the bare-ASGI baseline in the report checks
that. A general-purpose client (httpx, aiohttp) would parse every chunk.
"""

from __future__ import annotations

import asyncio
import socket
import time

CLOCK = time.perf_counter


_TEXT = b"TEXT_MESSAGE_CONTENT"


class Response:
    """One response, its timestamps (CLOCK seconds) and its raw body (chunked encoding included)."""

    __slots__ = (
        "headers",
        "keep_alive",
        "raw",
        "status",
        "t_end",
        "t_first_byte",
        "t_first_event",
        "t_first_text",
        "t_sent",
    )

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.t_sent = 0.0
        self.t_first_byte: float | None = None
        self.t_first_event: float | None = None
        self.t_first_text: float | None = None  # the first TEXT_MESSAGE_CONTENT frame
        self.t_end: float | None = None
        self.raw = b""
        self.keep_alive = True

    @property
    def ttfb(self) -> float:
        """Request sent -> first response byte (status line), seconds."""
        assert self.t_first_byte is not None
        return self.t_first_byte - self.t_sent

    @property
    def first_event(self) -> float:
        """Request sent -> first SSE data frame, seconds."""
        assert self.t_first_event is not None
        return self.t_first_event - self.t_sent

    @property
    def elapsed(self) -> float:
        """Request sent -> last byte, seconds."""
        assert self.t_end is not None
        return self.t_end - self.t_sent

    @property
    def body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            return self.raw
        return dechunk(self.raw)


def dechunk(raw: bytes) -> bytes:
    parts: list[bytes] = []
    pos = 0
    while True:
        eol = raw.index(b"\r\n", pos)
        size = int(raw[pos:eol].split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            return b"".join(parts)
        parts.append(raw[pos : pos + size])
        if raw[pos + size : pos + size + 2] != b"\r\n":
            raise ValueError("malformed chunked body")
        pos += size + 2


def count_frames(body: bytes) -> int:
    """SSE data frames in a body (every frame the servers send has a single ``data:`` line)."""
    return body.count(b"\ndata: ") + (1 if body.startswith(b"data: ") else 0)


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.header_end = -1
        self.chunked = False
        self.length: int | None = None
        self.response: Response | None = None
        self.done: asyncio.Future[None] | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def start(self, response: Response, request: bytes) -> asyncio.Future[None]:
        assert self.transport is not None
        self.buf = bytearray()
        self.header_end = -1
        self.chunked = False
        self.length = None
        self.response = response
        self.done = asyncio.get_running_loop().create_future()
        response.t_sent = CLOCK()
        self.transport.write(request)
        return self.done

    def data_received(self, data: bytes) -> None:
        now = CLOCK()  # first, so that parsing is not counted in the server's time
        response = self.response
        if response is None:
            return
        if response.t_first_byte is None:
            response.t_first_byte = now
        buf = self.buf
        before = len(buf)
        buf += data
        if self.header_end < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self._headers(bytes(buf[:end]))
            self.header_end = end + 4
            before = self.header_end
        # Look back 5 bytes: "data:" may straddle two reads.
        if response.t_first_event is None and buf.find(b"data:", max(self.header_end, before - 5)) >= 0:
            response.t_first_event = now
        if response.t_first_text is None and buf.find(_TEXT, max(self.header_end, before - len(_TEXT))) >= 0:
            response.t_first_text = now
        if self.chunked:
            # The terminating zero-size chunk, either alone or after a chunk's CRLF.
            if buf.endswith(b"0\r\n\r\n") and (len(buf) - 5 == self.header_end or buf[-7:-5] == b"\r\n"):
                self._finish(now)
        elif self.length is not None and len(buf) - self.header_end >= self.length:
            self._finish(now)

    def _headers(self, head: bytes) -> None:
        assert self.response is not None
        lines = head.decode("latin-1").split("\r\n")
        self.response.status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.response.headers = headers
        self.chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        if "content-length" in headers:
            self.length = int(headers["content-length"])
        self.response.keep_alive = headers.get("connection", "").lower() != "close"

    def _finish(self, now: float) -> None:
        response = self.response
        assert response is not None and self.done is not None
        response.t_end = now
        response.raw = bytes(self.buf[self.header_end :])
        if response.t_first_event is None:
            response.t_first_event = now
        self.response = None
        if not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            if self.response is not None and self.header_end >= 0 and not self.chunked and self.length is None:
                self.response.keep_alive = False
                self._finish(CLOCK())  # a body delimited by the end of the connection
            else:
                self.done.set_exception(ConnectionError(f"connection lost mid-response: {exc}"))


class Client:
    """Sequential requests to one loopback server over a keep-alive connection (reopened when the server closes it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: _Connection | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, within: float = 120.0
    ) -> Response:
        if self.conn is None or self.conn.lost:
            transport, self.conn = await asyncio.get_running_loop().create_connection(
                _Connection, "127.0.0.1", self.port
            )
            sock = transport.get_extra_info("socket")
            if sock is not None:  # small requests go out at once, not after Nagle's delay
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", "Accept: text/event-stream"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if body or method == "POST":
            head.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        response = Response()
        await asyncio.wait_for(self.conn.start(response, request), within)
        if not response.keep_alive:
            self.close()
        return response

    def close(self) -> None:
        if self.conn is not None and self.conn.transport is not None:
            self.conn.transport.close()
        self.conn = None
