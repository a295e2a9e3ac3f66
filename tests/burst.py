"""A burst of connections on raw sockets, for the connection cap's tests (and the reconnect-storm bench):
every connection is opened first, then every request is sent, so the server has them all before it
reads any request. Each answer is kept open (a held stream stays held) until the burst is closed."""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from dataclasses import dataclass, field

import orjson

# How long a burst waits for its connections and its answers: a bound on a server that hangs, far
# above what a server that works takes.
WAIT_SECONDS = 300


def raise_file_limit(needed: int) -> None:
    """This process's soft open-file limit, raised to at least ``needed`` (up to the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class Answer(asyncio.Protocol):
    """One connection and the answer to its request: the status and headers once they arrive, and the
    body as it comes (a 503's whole body: the server closes the connection after it)."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self._buffer = b""
        self._received = asyncio.Event()
        self.answered: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._received.set()
        if self.status:
            self.body += data
            return
        self._buffer += data
        head, found, rest = self._buffer.partition(b"\r\n\r\n")
        if not found:
            return
        status_line, *lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split(" ", 2)[1])
        for line in lines:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.body = rest
        if not self.answered.done():
            self.answered.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answered.done():
            self.answered.set_exception(ConnectionError(f"closed before an answer: {exc}"))
            self.answered.exception()  # retrieved: a burst that is not awaited logs nothing
        if not self.closed.done():
            self.closed.set_result(None)
        self._received.set()

    async def read_until(self, marker: bytes) -> None:
        """Waits until the body holds ``marker``; fails if the connection closes first."""
        while marker not in self.body:
            if self.closed.done():
                raise ConnectionError(f"closed before {marker!r}: {self.body[-200:]!r}")
            self._received.clear()
            await self._received.wait()

    @property
    def error_code(self) -> str | None:
        """The ``error.code`` of a JSON error body."""
        try:
            return str(orjson.loads(self.body)["error"]["code"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass
class Burst:
    answers: list[Answer] = field(default_factory=list)

    def statuses(self) -> Counter[int]:
        return Counter(answer.status for answer in self.answers)

    def refused(self) -> list[Answer]:
        return [answer for answer in self.answers if answer.status == 503]

    async def read_refusals(self) -> None:
        """Waits for the whole body of every 503 (the server closes those connections)."""
        refused = [answer.closed for answer in self.refused()]
        if refused:
            await asyncio.wait_for(asyncio.gather(*refused), WAIT_SECONDS)

    async def close(self) -> None:
        for answer in self.answers:
            answer.close()
        await asyncio.sleep(0)  # the transports close their sockets on the loop's next turn


def spread(count: int, sources: list[str]) -> list[str]:
    """``count`` source addresses, taking ``sources`` in turn."""
    return [sources[i % len(sources)] for i in range(count)]


async def open_burst(port: int, requests: list[bytes], sources: list[str]) -> tuple[Burst, list[Answer]]:
    """Opens one connection for each request, from the source address of the same index, all of them
    before any request is sent, then sends them all, and waits for every answer's status line.
    Returns the burst (to close) and its connections, each at the index of its request."""
    assert len(sources) == len(requests)
    raise_file_limit(len(requests) + 1024)
    loop = asyncio.get_running_loop()
    burst = Burst()

    async def connect(source: str) -> Answer:
        _, answer = await loop.create_connection(Answer, "127.0.0.1", port, local_addr=(source, 0))
        burst.answers.append(answer)
        return answer

    try:
        answers = await asyncio.wait_for(asyncio.gather(*(connect(source) for source in sources)), WAIT_SECONDS)
        for answer, request in zip(answers, requests, strict=True):
            assert answer.transport is not None
            answer.transport.write(request)
        await asyncio.wait_for(asyncio.gather(*(answer.answered for answer in answers)), WAIT_SECONDS)
    except BaseException:
        await burst.close()
        raise
    return burst, answers
