"""``--streams N``: many SSE streams held open on one server process at once.

The scripted full stack serves ``--slow-runs`` slow runs (one token every
``--slow-ms`` ms, until the bench tells them to stop); each run's own POST
stream is one open stream, and the rest are reattach streams
(``GET .../runs/<run>/events?after=0``) spread over the runs. Streams are
opened in batches; after every 1,000 the server's OS threads, open file
descriptors and RSS are read from /proc. With all of them open, ``/agui/info``
is timed (sequential requests) to see whether the server still answers. Then
the slow runs are stopped and every stream must end with RUN_FINISHED after a
200: anything else is an error.
"""

from __future__ import annotations

import asyncio
import json
import resource
import statistics
import uuid
from dataclasses import dataclass, field
from typing import Any

from httpclient import CLOCK, Client
from processes import TOKEN, ServerProc
from procfigures import proc_figures

AUTH = f"Authorization: Bearer {TOKEN}"
TAIL = 512  # bytes of each stream's end kept, to see its terminal event


class _Stream(asyncio.Protocol):
    """One SSE response, read and dropped as it comes: only its status, its first data frame and its tail count."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.status = 0
        self.tail = b""
        self.first_data = asyncio.get_running_loop().create_future()
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self.head.split(b" ", 2)[1])
            data, self.head = self.head[end + 4 :], b""
        self.tail = (self.tail + data)[-TAIL:]
        if not self.first_data.done() and b"data: " in self.tail:
            self.first_data.set_result(None)
        if self.tail.endswith(b"\r\n0\r\n\r\n") or self.tail == b"0\r\n\r\n":
            self._end(None)
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(ConnectionError(f"connection lost: {exc}"))

    def _end(self, error: Exception | None) -> None:
        if not self.first_data.done():
            self.first_data.set_exception(error or ConnectionError("ended before any data frame"))
            self.first_data.exception()  # retrieved, so an unawaited failure is not logged twice
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)
                self.done.exception()

    @property
    def finished_cleanly(self) -> bool:
        return (
            self.status == 200 and self.done.done() and self.done.exception() is None and b"RUN_FINISHED" in self.tail
        )


@dataclass
class Sample:
    streams: int
    threads: int
    fds: int
    rss_mib: float


@dataclass
class OpenStreamsResult:
    streams: int
    samples: list[Sample] = field(default_factory=list)
    info_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    open_seconds: float = 0.0


def raise_own_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(needed, soft)), hard))


async def _open(port: int, request: bytes) -> _Stream:
    loop = asyncio.get_running_loop()
    _, stream = await loop.create_connection(_Stream, "127.0.0.1", port)
    assert stream.transport is not None
    stream.transport.write(request)
    return stream


def _post(port: int, thread_id: str, run_id: str, slow_ms: int) -> bytes:
    body = json.dumps(
        {
            "threadId": thread_id,
            "runId": run_id,
            "messages": [
                {"id": f"m-{uuid.uuid4().hex}", "role": "user", "content": f"slow please bench-slow={slow_ms}"}
            ],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
            "protocolVersion": "1.0",
        }
    ).encode()
    head = (
        f"POST /agui/coder HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{AUTH}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _get(port: int, thread_id: str, run_id: str) -> bytes:
    return (
        f"GET /agui/coder/threads/{thread_id}/runs/{run_id}/events?after=0 HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n{AUTH}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()


async def _time_info(client: Client, count: int, gap: float) -> list[float]:
    times = []
    for _ in range(count):
        await asyncio.sleep(gap)
        started = CLOCK()
        response = await client.request("GET", "/agui/info", b"", {"Authorization": f"Bearer {TOKEN}"})
        if response.status != 200:
            raise RuntimeError(f"/agui/info answered {response.status} with the streams open")
        times.append((CLOCK() - started) * 1e3)
    return times


async def measure_open_streams(
    server: ServerProc, streams: int, slow_runs: int, slow_ms: int, batch: int = 250, info_requests: int = 200
) -> OpenStreamsResult:
    raise_own_file_limit(streams + 1024)
    port = server.port
    result = OpenStreamsResult(streams=streams)
    pid = server.proc.pid
    threads, fds, rss, _ = proc_figures(pid)
    result.samples.append(Sample(0, threads, fds, rss))
    opened: list[_Stream] = []
    started = CLOCK()
    runs = [(f"t-open-{uuid.uuid4().hex}", f"r-open-{i}") for i in range(max(1, min(slow_runs, streams)))]
    next_sample = 1000
    try:
        for thread_id, run_id in runs:
            opened.append(await _open(port, _post(port, thread_id, run_id, slow_ms)))
        await asyncio.gather(*(s.first_data for s in opened))  # every run is live before anyone reattaches
        while len(opened) < streams:
            count = min(batch, streams - len(opened))
            fresh = await asyncio.gather(
                *(_open(port, _get(port, *runs[(len(opened) + i) % len(runs)])) for i in range(count))
            )
            await asyncio.wait_for(asyncio.gather(*(s.first_data for s in fresh)), 120)
            opened += fresh
            server.check_alive()
            if len(opened) >= next_sample or len(opened) == streams:
                threads, fds, rss, _ = proc_figures(pid)
                result.samples.append(Sample(len(opened), threads, fds, rss))
                print(f"  {len(opened):6,} open streams: {threads} threads, {fds} fds, RSS {rss:,.0f} MiB", flush=True)
                next_sample = (len(opened) // 1000 + 1) * 1000
        result.open_seconds = CLOCK() - started
        info_client = Client(port)
        try:
            result.info_ms = await _time_info(info_client, info_requests, 0.01)
        finally:
            info_client.close()
        threads, fds, rss, _ = proc_figures(pid)
        result.samples.append(Sample(len(opened), threads, fds, rss))
    except Exception as exc:
        result.errors.append(f"while opening ({len(opened)} open): {exc!r}")
    finally:
        stopper = Client(port)
        try:
            await stopper.request("POST", "/bench/slow/stop")
        finally:
            stopper.close()
        if opened:
            await asyncio.wait([s.done for s in opened], timeout=300)
        result.peak_rss_mib = proc_figures(pid)[3]
        for s in opened:
            if not s.finished_cleanly:
                result.errors.append(f"status {s.status}, ended {s.done.done()}, tail {s.tail[-120:]!r}")
            if s.transport is not None:
                s.transport.close()
    return result


def open_streams_report(result: OpenStreamsResult) -> tuple[str, dict[str, Any]]:
    """The figures of one open-streams measurement, per 1,000 streams, and the verdict on the targets."""
    base = result.samples[0]
    top = max(result.samples, key=lambda s: s.streams)
    per_k = max(1, top.streams) / 1000
    max_threads = max(s.threads for s in result.samples)
    p50 = statistics.median(result.info_ms) if result.info_ms else float("nan")
    p99 = statistics.quantiles(result.info_ms, n=100)[98] if len(result.info_ms) >= 2 else float("nan")
    lines = [
        f"Open streams: {top.streams:,} on one process (opened in {result.open_seconds:.1f}s)",
        f"  idle: {base.threads} threads, {base.fds} fds, RSS {base.rss_mib:,.0f} MiB",
        f"  open: {top.threads} threads (max {max_threads}), {top.fds} fds, RSS {top.rss_mib:,.0f} MiB, "
        f"peak RSS {result.peak_rss_mib:,.0f} MiB",
        f"  per 1,000 streams: {(top.threads - base.threads) / per_k:+.1f} threads, "
        f"{(top.fds - base.fds) / per_k:,.0f} fds, {(top.rss_mib - base.rss_mib) / per_k:,.1f} MiB RSS",
        f"  /agui/info meanwhile: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {max(result.info_ms, default=0):.2f} ms "
        f"({len(result.info_ms)} requests)",
        f"  errors: {len(result.errors)}" + (f" (first: {result.errors[0]})" if result.errors else ""),
    ]
    targets = {
        "threads <= 50": max_threads <= 50,
        "peak RSS <= 1 GiB": result.peak_rss_mib <= 1024,
        "/agui/info p99 < 50 ms": p99 < 50,
        "0 errors": not result.errors,
    }
    lines.append("  targets: " + "; ".join(f"{name}: {'MET' if ok else 'MISSED'}" for name, ok in targets.items()))
    data = {
        "streams": top.streams,
        "samples": [s.__dict__ for s in result.samples],
        "max_threads": max_threads,
        "peak_rss_mib": result.peak_rss_mib,
        "info_ms_p50": p50,
        "info_ms_p99": p99,
        "errors": len(result.errors),
        "targets": targets,
    }
    return "\n".join(lines), data
