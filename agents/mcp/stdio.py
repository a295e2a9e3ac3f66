"""The stdio transport of an MCP server, reading its messages in linear time with a byte bound
(issue #49 item 11).

The SDK's ``stdio_client`` joins what it has buffered with each new chunk and splits the whole
again, so one long line costs time quadratic in its length, on the event loop: a 20 MB result took
7.5 s and 100 MB never finished. Here each chunk is searched once for its line ends and a line's
pieces are joined once; a line over ``max_message_bytes`` is not kept at all (only its first and
last bytes, to find the request it answers, which then fails saying why); and a line of more than
``PARSE_ON_THREAD`` bytes is parsed on a thread. Starting and stopping the process (its own process
group; stdin closed, then SIGTERM, then SIGKILL to the group) are the SDK's own, reused.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TextIO

import anyio
import anyio.lowlevel
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client import stdio as sdk_stdio
from mcp.client.stdio import StdioServerParameters
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

PARSE_ON_THREAD = 1024 * 1024
OVERSIZED = "threadline:oversized"  # the ``data`` of the error a call gets for an answer over the bound
_KEPT = 512  # bytes kept of each end of a line over the bound
_ID = r'(-?\d+|"(?:[^"\\]|\\.)*")'
_ID_FIRST = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*' + _ID.encode())
_ID_LAST = re.compile(rb'"id"\s*:\s*' + _ID.encode() + rb"\s*\}\s*$")


@dataclass(slots=True, frozen=True)
class Oversized:
    """A line over the bound: its size, and its first and last bytes."""

    size: int
    head: bytes
    tail: bytes


class LineReader:
    """Splits a byte stream into lines, in time linear in its length, keeping at most ``limit`` bytes
    of a line: a longer one comes out as ``Oversized``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._over: Oversized | None = None

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        """The lines ``chunk`` ends (without their ``\\n``)."""
        lines: list[bytes | Oversized] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._add(chunk[start:end])
            lines.append(self._take())
            start = end + 1
        if start < len(chunk):
            self._add(chunk[start:])
        return lines

    def _add(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._over is not None:
            self._over = Oversized(self._size, self._over.head, (self._over.tail + piece)[-_KEPT:])
        elif self._size > self.limit:
            whole = b"".join((*self._parts, piece))  # once per line over the bound
            self._over, self._parts = Oversized(self._size, whole[:_KEPT], whole[-_KEPT:]), []
        else:
            self._parts.append(piece)

    def _take(self) -> bytes | Oversized:
        line: bytes | Oversized = self._over if self._over is not None else b"".join(self._parts)
        self._parts, self._size, self._over = [], 0, None
        return line


def answer_id(line: Oversized) -> int | str | None:
    """The id of the request a JSON-RPC response over the bound answers, when its first or last
    bytes say it (the top-level ``id`` is the first key, after ``jsonrpc``, or the last)."""
    found = _ID_FIRST.search(line.head) or _ID_LAST.search(line.tail)
    if found is None:
        return None
    value = json.loads(found.group(1))
    return value if isinstance(value, int | str) else None


async def _message(line: bytes | Oversized, limit: int) -> SessionMessage | Exception | None:
    if isinstance(line, Oversized):
        said = f"a message of {line.size} bytes, over the bound of {limit} (MCP_MAX_MESSAGE_BYTES); it was dropped"
        request_id = answer_id(line)
        if request_id is None:
            return ValueError(f"it sent {said}")
        error = {"code": -32603, "message": f"answered with {said}", "data": OVERSIZED}
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()
    if not line.strip():
        return None
    text = line.decode("utf-8", "replace")
    if len(line) > PARSE_ON_THREAD:
        return await anyio.to_thread.run_sync(sdk_stdio._parse_line, text)
    return sdk_stdio._parse_line(text)


Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@asynccontextmanager
async def stdio_transport(
    server: StdioServerParameters, *, errlog: TextIO, max_message_bytes: int
) -> AsyncIterator[Streams]:
    """The SDK's ``stdio_client``, but for how the server's stdout is read (above)."""
    process = await sdk_stdio._create_platform_compatible_process(
        command=server.command,
        args=server.args,
        env=sdk_stdio.get_default_environment() | (server.env or {}),
        errlog=errlog,
        cwd=server.cwd,
    )
    # From here no awaits until the task group is entered (a cancellation would leak the process).
    read_stream_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_stream_reader = anyio.create_memory_object_stream[SessionMessage](0)
    shutting_down = False
    writer_done = anyio.Event()

    async def stdout_reader() -> None:
        assert process.stdout is not None
        lines = LineReader(max_message_bytes)
        try:
            async with read_stream_writer:
                try:
                    async for chunk in process.stdout:
                        for line in lines.feed(chunk):
                            message = await _message(line, max_message_bytes)
                            if message is None:
                                continue
                            try:
                                await read_stream_writer.send(message)
                            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                                return
                finally:
                    await sdk_stdio._drain_stdout(process)
        except anyio.ClosedResourceError:
            pass
        except (anyio.BrokenResourceError, ConnectionError):
            if not shutting_down:
                log.exception("reading an MCP server's stdout failed mid-session")

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_stream_reader:
                async for session_message in write_stream_reader:
                    data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_stream_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(sdk_stdio._WRITER_FLUSH_TIMEOUT):
            await writer_done.wait()
        await sdk_stdio._stop_server_process(process)
        await sdk_stdio._aclose_all(read_stream, write_stream, read_stream_writer, write_stream_reader)
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            shutting_down = True
            with anyio.CancelScope(shield=True):  # the process must be stopped even when cancelled
                await shutdown()
            group.cancel_scope.cancel()
    await anyio.lowlevel.cancel_shielded_checkpoint()
