"""A model at its pace for bench/paced.py: FakeAnthropic's replies, each SSE event written when due.

    python bench/paced_model.py      # prints its base URL, then serves until stdin closes

Every POST /v1/messages is answered with a text reply (FakeAnthropic's ``text_turn``, the same
bytes) of N one-token deltas, one event every MS milliseconds: event k due at the start + k * MS,
whether the reader keeps up or not, as a model's tokens leave its servers. N and MS are read from
the request (``bench-tokens=N``, ``bench-slow=MS`` in the user's message; 10 and 0 when absent).

FakeAnthropic serves each connection on a thread of its own: a thousand paced streams are a
thousand threads taking turns at the GIL, which fall behind their pace on a shared core before
the server under test does. Here one event loop (uvloop) writes them all.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.fakes.anthropic_api import Turn, text_turn  # noqa: E402
from tests.fakes.anthropic_api.wire import TERMINATOR, frame  # noqa: E402

_TOKENS = re.compile(rb"bench-tokens=(\d+)")
_PACE = re.compile(rb"bench-slow=(\d+)")
_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nrequest-id: req_paced\r\nConnection: keep-alive\r\n\r\n"
)
_ids = itertools.count(1)
_turns: dict[int, Turn] = {}


def _turn(tokens: int) -> Turn:
    if tokens not in _turns:
        _turns[tokens] = text_turn(["tok "] * tokens).prepare()
    return _turns[tokens]


class _Connection(asyncio.Protocol):
    """One keep-alive connection: requests one after another, each answered paced."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._next()

    def _next(self) -> None:
        if self.busy:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end].lower()
        length = re.search(rb"\r\ncontent-length: *(\d+)", head)
        size = int(length.group(1)) if length else 0
        if len(self.buffer) < end + 4 + size:
            return
        body = self.buffer[end + 4 : end + 4 + size]
        self.buffer = self.buffer[end + 4 + size :]
        self.busy = True
        asyncio.get_running_loop().create_task(self._answer(body))

    async def _answer(self, body: bytes) -> None:
        tokens = int(m.group(1)) if (m := _TOKENS.search(body)) else 10
        pace = int(m.group(1)) / 1000 if (m := _PACE.search(body)) else 0.0
        turn = _turn(tokens)
        events = [turn.message_start(f"msg_paced_{next(_ids):06d}", "claude-paced"), *turn.encoded().post_start]
        transport = self.transport
        assert transport is not None
        transport.write(_HEAD)
        loop = asyncio.get_running_loop()
        due = loop.time()
        for event in events:
            if transport.is_closing():
                return
            if pace:
                await asyncio.sleep(max(0.0, due - loop.time()))
                due += pace
            transport.write(frame(event))
        transport.write(TERMINATOR)
        self.busy = False
        self._next()


async def serve() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Connection, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"http://127.0.0.1:{port}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the bench closes the pipe
    server.close()


if __name__ == "__main__":
    import uvloop

    uvloop.run(serve())
