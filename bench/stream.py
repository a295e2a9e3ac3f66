"""Streaming benchmark: Threadline's full AG-UI stack against a bare ASGI app and a plain Django view.

    .venv/bin/python bench/stream.py            # or: make bench
    .venv/bin/python bench/stream.py --quick    # a fast smoke run
    .venv/bin/python bench/stream.py --profile py-spy --breakdown   # where the time goes

Four servers, each in its own subprocess on its own loopback port, all on the same
server software (uvicorn with uvloop and httptools; ``--server daphne`` for daphne):

  bare      baseline 1: a bare ASGI app writing pre-encoded SSE frames
  django    baseline 2: a plain Django async view, StreamingHttpResponse over an async
            generator, served by Django's standard ASGIHandler (bench/django_min.py)
  sdk       the full stack (fresh data dir, migrated SQLite, event log on) with the real
            anthropic SDK talking to tests/fakes/anthropic_api.py FakeAnthropic
  scripted  the full stack with an in-process scripted model (bench/servers.py swaps
            provider_for in the server subprocess only)

Every stream yields to the event loop every 64 frames/deltas, as a network read would.
Threadline runs are timed on an idle server: before each request the bench waits until
the previous run is recorded in the database (the server's SQLite file, read-only).
For each server it measures events/s of one long reply (SSE data frames received by
the client, from request sent to last byte) and the time to first byte of a short
reply (median over many sequential requests after warm-up; every Threadline request
on a new threadId and runId). The client is a raw asyncio protocol in this process
(baseline 1's rate shows it is not the bottleneck). Targets: the full stack streams
at least 0.3x the Django view's events/s with at most 3x its TTFB.

Diagnostics (after the table):
  --profile py-spy|cprofile  where the full stack spends its time per event while streaming
                             (py-spy: pip install --target /tmp/pyspy py-spy, or set PY_SPY)
  --breakdown                the phases before the first byte of a Threadline request (timed
                             inside the server subprocess by wrapping the view's helpers)
  --whatif LIST              one more row: the full stack with bench-only prototypes of the
                             suggested changes (fast-log, agent-cache, lean-open, db-thread)
  --server daphne / --loop asyncio   the same comparison on other server software

Nothing here needs the network; every subprocess and temporary directory is
removed at exit (servers also stop by themselves if this process dies).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PYTHON = sys.executable
TOKEN = "bench-token"
CLOCK = time.perf_counter

LABELS = {
    "bare": "bare ASGI app (baseline 1)",
    "django": "plain Django view (baseline 2)",
    "sdk": "Threadline, anthropic SDK + FakeAnthropic",
    "scripted": "Threadline, in-process scripted model",
    "whatif": "scripted + what-if prototypes",
}
ALL_SERVERS = ("bare", "django", "sdk", "scripted")
TARGET_RATE = 0.3
TARGET_TTFB = 3.0


# --------------------------------------------------------------------------- the HTTP client


class Response:
    __slots__ = ("headers", "keep_alive", "raw", "status", "t_end", "t_first_byte", "t_first_event", "t_sent")

    def __init__(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.t_sent = 0.0
        self.t_first_byte: float | None = None
        self.t_first_event: float | None = None
        self.t_end: float | None = None
        self.raw = b""
        self.keep_alive = True

    @property
    def ttfb(self) -> float:
        assert self.t_first_byte is not None
        return self.t_first_byte - self.t_sent

    @property
    def first_event(self) -> float:
        assert self.t_first_event is not None
        return self.t_first_event - self.t_sent

    @property
    def elapsed(self) -> float:
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


class _Protocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection. The hot path is an append and an endswith per read."""

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
        now = CLOCK()
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
        if response.t_first_event is None and buf.find(b"data:", max(self.header_end, before - 5)) >= 0:
            response.t_first_event = now
        if self.chunked:
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
    """Sequential requests to one server over a keep-alive connection (reopened when the server closes it)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proto: _Protocol | None = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, within: float = 120.0
    ) -> Response:
        if self.proto is None or self.proto.lost:
            loop = asyncio.get_running_loop()
            _transport, self.proto = await loop.create_connection(_Protocol, "127.0.0.1", self.port)
            sock = _transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", "Accept: text/event-stream"]
        for name, value in (headers or {}).items():
            head.append(f"{name}: {value}")
        if body or method == "POST":
            head.append(f"Content-Length: {len(body)}")
        request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        response = Response()
        await asyncio.wait_for(self.proto.start(response, request), within)
        if not response.keep_alive:
            self.close()
        return response

    def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()
        self.proto = None


def count_frames(body: bytes) -> int:
    """SSE data frames in a body (frames here are single-line ``data:`` frames)."""
    return body.count(b"\ndata: ") + (1 if body.startswith(b"data: ") else 0)


# --------------------------------------------------------------------------- the servers


@dataclass
class ServerProc:
    name: str
    kind: str
    env: dict[str, str]
    server: str
    log_path: Path
    loop: str = "uvloop"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        self.port = sock.getsockname()[1]
        log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                [
                    PYTHON,
                    str(BENCH / "servers.py"),
                    self.kind,
                    "--fd",
                    str(sock.fileno()),
                    "--server",
                    self.server,
                    "--loop",
                    self.loop,
                ],
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(sock.fileno(),),
            )
        finally:
            log.close()
            sock.close()  # the child has its own copy

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"server {self.name} exited early; its log ends:\n{self.log_tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class FakeModel:
    """bench/fake_model.py in its own process (FakeAnthropic scripted over a pipe)."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [PYTHON, str(BENCH / "fake_model.py")],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().decode().strip()
        if not self.base_url.startswith("http://"):
            raise RuntimeError(f"FakeAnthropic did not start (said {self.base_url!r}); see {log_path}")

    def command(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().decode().strip()
        if answer.startswith("error"):
            raise RuntimeError(answer)
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "DJANGO_", "BENCH_")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


def prepare_threadline(tmp: Path, names: list[str]) -> dict[str, Path]:
    """A migrated data dir per Threadline server (migrated once, then copied)."""
    first = tmp / f"data-{names[0]}"
    env = base_env() | {
        "THREADLINE_DATA_DIR": str(first),
        "AGUI_TOKEN": TOKEN,
        "LOG_LEVEL": "WARNING",
        "AGENT_WORKSPACE": str(tmp / "workspace"),
    }
    (tmp / "workspace").mkdir(exist_ok=True)
    (tmp / "workspace" / "README.md").write_text("bench workspace\n")
    done = subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=REPO, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py migrate failed:\n{done.stdout}\n{done.stderr}")
    dirs = {names[0]: first}
    for name in names[1:]:
        shutil.copytree(first, tmp / f"data-{name}")
        dirs[name] = tmp / f"data-{name}"
    return dirs


def threadline_env(tmp: Path, data_dir: Path, fake_url: str | None) -> dict[str, str]:
    env = base_env() | {
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "THREADLINE_DATA_DIR": str(data_dir),
        "AGUI_TOKEN": TOKEN,
        "LOG_LEVEL": "WARNING",
        "AGENT_WORKSPACE": str(tmp / "workspace"),
    }
    if fake_url:
        env["ANTHROPIC_API_KEY"] = "bench-not-a-key"
        env["ANTHROPIC_BASE_URL"] = fake_url
    return env


# --------------------------------------------------------------------------- one server under test


@dataclass
class Target:
    name: str
    proc: ServerProc
    fake: FakeModel | None = None
    db_path: Path | None = None  # the Threadline server's SQLite file, read to see when a run is recorded
    settle: bool = True
    rates: list[float] = field(default_factory=list)
    durable_rates: list[float] = field(default_factory=list)
    log_lag: list[float] = field(default_factory=list)
    stream_seconds: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    first_event: list[float] = field(default_factory=list)
    frames: int = 0

    @property
    def is_threadline(self) -> bool:
        return self.name in ("sdk", "scripted", "whatif")

    def request_args(self, tokens: int) -> tuple[str, str, bytes, dict[str, str], str]:
        if not self.is_threadline:
            body = json.dumps({"threadId": "t", "runId": "r", "messages": []}).encode()
            return "POST", f"/stream?n={tokens}", body, {"Content-Type": "application/json"}, ""
        run_id = f"r-{uuid.uuid4().hex}"
        message = {"id": f"m-{uuid.uuid4().hex}", "role": "user", "content": f"Stream please. bench-tokens={tokens}"}
        body = json.dumps(
            {
                "threadId": f"t-{uuid.uuid4().hex}",
                "runId": run_id,
                "messages": [message],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
                "protocolVersion": "1.0",
            }
        ).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        return "POST", "/agui/coder", body, headers, run_id

    async def recorded(self, run_id: str, within: float = 120.0) -> tuple[float, int, int]:
        """Waits until the run is recorded as finished (its event log written, then run_finish);
        returns (when, the run's event_count, RunEvent rows stored)."""
        import sqlite3

        assert self.db_path is not None
        deadline = CLOCK() + within
        db = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5)
        try:
            while True:
                row = db.execute(
                    "SELECT id, status, event_count FROM threads_run WHERE agui_run_id = ?", (run_id,)
                ).fetchone()
                if row is not None and row[1] != "running":
                    when = CLOCK()
                    stored = db.execute("SELECT count(*) FROM threads_runevent WHERE run_id = ?", (row[0],)).fetchone()[
                        0
                    ]
                    if row[1] != "succeeded":
                        raise RuntimeError(f"{self.name}: run {run_id} was recorded as {row[1]}")
                    return when, row[2], stored
                if CLOCK() > deadline:
                    raise RuntimeError(f"{self.name}: run {run_id} was not recorded within {within}s")
                self.proc.check_alive()
                await asyncio.sleep(0.002)
        finally:
            db.close()

    def queue(self, tokens: int, times: int, long: bool) -> None:
        if self.fake is not None:
            self.fake.command(f"bench {tokens}" if long else f"text {tokens} {times}")

    def check(self, response: Response, tokens: int) -> int:
        """The response is a complete, successful stream of ``tokens`` text deltas; returns its frame count."""
        if response.status != 200:
            raise RuntimeError(f"{self.name}: HTTP {response.status}: {response.body[:500]!r}")
        body = response.body
        deltas = body.count(b'"TEXT_MESSAGE_CONTENT"')
        if deltas != tokens:
            raise RuntimeError(f"{self.name}: expected {tokens} text deltas, got {deltas}; body ends {body[-400:]!r}")
        if self.is_threadline:
            last = body.rstrip().rsplit(b"\n", 1)[-1]
            if b'"RUN_FINISHED"' not in last:
                raise RuntimeError(f"{self.name}: the run did not finish cleanly; body ends {body[-400:]!r}")
            if (
                self.name == "scripted" or (self.name == "whatif" and self.fake is None)
            ) and b'"bench-scripted"' not in body:
                raise RuntimeError("scripted: the scripted provider is not the one serving the run")
        return count_frames(body)

    async def one(self, client: Client, tokens: int, long: bool) -> tuple[Response, str]:
        self.proc.check_alive()
        self.queue(tokens, 1, long)
        method, path, body, headers, run_id = self.request_args(tokens)
        return await client.request(method, path, body, headers), run_id

    async def settled(self, run_id: str) -> None:
        """Nothing of the previous run still working in the server (its log and end are written)."""
        if self.is_threadline and self.settle and run_id:
            await self.recorded(run_id)

    async def warm_up(self, client: Client, short: int, count: int) -> None:
        if self.fake is not None:
            self.fake.command(f"text {short} {count}")
        for _ in range(count):
            method, path, body, headers, run_id = self.request_args(short)
            self.check(await client.request(method, path, body, headers), short)
            await self.settled(run_id)
        long, run_id = await self.one(client, 1000, long=True)
        self.check(long, 1000)
        await self.settled(run_id)

    async def measure_stream(self, client: Client, tokens: int) -> None:
        response, run_id = await self.one(client, tokens, long=True)
        frames = self.check(response, tokens)
        self.frames = frames
        self.rates.append(frames / response.elapsed)
        self.stream_seconds.append(response.elapsed)
        if self.is_threadline:
            when, event_count, stored = await self.recorded(run_id)
            if not (event_count == stored == frames):
                raise RuntimeError(
                    f"{self.name}: {frames} frames streamed but the run recorded "
                    f"event_count={event_count} and {stored} RunEvent rows"
                )
            self.durable_rates.append(frames / (when - response.t_sent))
            self.log_lag.append(when - (response.t_end or when))

    async def measure_ttfb(self, client: Client, tokens: int, count: int, gap: float) -> None:
        if self.fake is not None:
            self.fake.command(f"text {tokens} {count}")
        for _ in range(count):
            if gap:
                await asyncio.sleep(gap)
            self.proc.check_alive()
            method, path, body, headers, run_id = self.request_args(tokens)
            response = await client.request(method, path, body, headers)
            self.check(response, tokens)
            self.ttfb.append(response.ttfb)
            self.first_event.append(response.first_event)
            await self.settled(run_id)


async def wait_ready(target: Target, within: float = 90.0) -> None:
    """The listening socket exists from the start; a first request waits in its backlog until the app is up."""
    deadline = time.monotonic() + within
    while True:
        target.proc.check_alive()
        client = Client(target.proc.port)
        try:
            path = "/agui/info" if target.is_threadline else "/stream?n=1"
            headers = {"Authorization": f"Bearer {TOKEN}"} if target.is_threadline else {}
            response = await client.request("GET", path, b"", headers, within=max(1.0, deadline - time.monotonic()))
            if response.status != 200:
                raise RuntimeError(
                    f"{target.name}: readiness request got HTTP {response.status}: {response.body[:300]!r}"
                )
            return
        except (TimeoutError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"server {target.name} did not become ready; its log ends:\n{target.proc.log_tail()}"
                ) from None
            await asyncio.sleep(0.1)
        finally:
            client.close()


# --------------------------------------------------------------------------- profiling


def find_py_spy() -> str | None:
    for candidate in (os.environ.get("PY_SPY"), shutil.which("py-spy"), "/tmp/pyspy/bin/py-spy"):
        if candidate and os.path.exists(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


PRODUCT_FILES = ("agui/", "agents/", "threads/", "project/")
# Leaf frames of threads that are blocked waiting (an idle executor worker, the parent watchdog).
IDLE_LEAVES = ("_worker (concurrent/futures/thread.py:", "_exit_with_parent.<locals>.watch (", "wait (threading.py:")


def summarize_collapsed(path: Path, rate: int, events: int, top: int = 28) -> str:
    """py-spy raw (collapsed) stacks -> self and inclusive time per function, in µs per event."""
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    per_thread: collections.Counter[str] = collections.Counter()
    loop_threads: set[str] = set()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = frames[0] if frames and frames[0].startswith("thread (") else "thread (?)"
        if frames and frames[0].startswith("thread ("):
            frames = frames[1:]
        if not frames:
            continue
        if any(f.startswith("main (servers.py:") for f in frames):
            loop_threads.add(thread)  # the thread that runs the server's main(): the event loop
        if frames[-1].startswith(IDLE_LEAVES):
            continue  # a thread blocked waiting (py-spy cannot tell while it pauses the process)
        total += count
        per_thread[thread] += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            incl_counts[name] += count

    def us(count: int) -> float:
        return count / rate / events * 1e6

    thread_counts: collections.Counter[str] = collections.Counter()
    for thread, count in per_thread.items():
        thread_counts["event loop" if thread in loop_threads else "other threads"] += count

    lines = [
        f"  busy CPU in the server process: {us(total):.2f} µs/event "
        + "("
        + ", ".join(f"{k} {us(v):.2f}" for k, v in thread_counts.most_common())
        + ")"
    ]
    lines.append("  top functions by self time (µs/event; C calls count in their Python caller):")
    for name, count in self_counts.most_common(top):
        lines.append(f"    {us(count):7.2f}  {100 * count / total:5.1f}%  {name}")
    lines.append("  product functions by inclusive time (µs/event):")
    product = [(n, c) for n, c in incl_counts.items() if any(f"({p}" in n for p in PRODUCT_FILES)]
    for name, count in sorted(product, key=lambda item: -item[1])[:top]:
        lines.append(f"    {us(count):7.2f}  {100 * count / total:5.1f}%  {name}")
    return "\n".join(lines)


def summarize_cprofile(path: Path, events: int, top: int = 30) -> str:
    import pstats

    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, nc, f"{func} ({_short(filename)}:{line})"))
    lines = ["  cProfile (inflates small calls; use the proportions) — µs/event: self, inclusive, calls/event"]
    for tt, ct, nc, name in sorted(rows, reverse=True)[:top]:
        lines.append(f"    {tt / events * 1e6:7.2f} {ct / events * 1e6:8.2f} {nc / events:6.2f}  {name}")
    lines.append("  product functions by inclusive time:")
    product = [r for r in rows if any(p in r[3] for p in PRODUCT_FILES)]
    for tt, ct, nc, name in sorted(product, key=lambda r: -r[1])[:top]:
        lines.append(f"    {tt / events * 1e6:7.2f} {ct / events * 1e6:8.2f} {nc / events:6.2f}  {name}")
    return "\n".join(lines)


def _short(filename: str) -> str:
    for marker in ("site-packages/", str(REPO) + "/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


async def profile_streams(
    target: Target,
    client: Client,
    tokens: int,
    streams: int,
    tool: str,
    out: Path,
    rate: int,
    nonblocking: bool = False,
) -> str:
    """Records py-spy while ``streams`` long replies stream (the server was started with BENCH_PROFILE for cProfile)."""
    spy = None
    if tool == "py-spy":
        exe = find_py_spy()
        assert exe is not None and target.proc.proc is not None
        spy = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(target.proc.proc.pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--function",
                "--threads",
                *(["--nonblocking"] if nonblocking else []),
                "--output",
                str(out),
                "--duration",
                "600",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        await asyncio.sleep(1.0)  # let it attach
    frames = 0
    started = CLOCK()
    try:
        for _ in range(streams):
            response, run_id = await target.one(client, tokens, long=True)
            frames += target.check(response, tokens)
            # The log writes and run_finish after the last byte are part of the cost: wait for them.
            await target.recorded(run_id)
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            try:
                _out, err = spy.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
                _out, err = spy.communicate()
    elapsed = CLOCK() - started
    head = f"  {streams} streams x {tokens} tokens = {frames} events in {elapsed:.2f}s"
    if tool == "py-spy":
        return head + "\n" + _spy_summary(out, err, rate, frames)
    return head  # cProfile stats are read after the server exits


def _spy_summary(out: Path, err: bytes, rate: int, frames: int) -> str:
    if not out.exists():
        return f"  py-spy wrote nothing: {err.decode(errors='replace')[-500:]}"
    return summarize_collapsed(out, rate, frames)


# --------------------------------------------------------------------------- TTFB breakdown


def summarize_trace(path: Path) -> str:
    records = json.loads(path.read_text())
    if not records:
        return "  (no requests traced)"
    keys: dict[str, list[float]] = collections.defaultdict(list)
    for record in records:
        for key, value in record.items():
            keys[key].append(value)
    n = len(records)
    lines = [f"  {n} requests; median (p90) in ms, over the requests where the phase ran [count]:"]
    for key in sorted(keys, key=lambda k: (not k.startswith("="), -statistics.median(keys[k]))):
        values = sorted(keys[key])
        p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
        lines.append(f"    {statistics.median(values) * 1e3:7.3f} ({p90 * 1e3:7.3f})  [{len(values):3d}]  {key}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- report


def summary(values: list[float], stat: str, higher_is_better: bool) -> float:
    if not values:
        return float("nan")
    if stat == "best":
        return max(values) if higher_is_better else min(values)
    return statistics.median(values)


def report(targets: dict[str, Target], args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    out: list[str] = []
    data: dict[str, Any] = {
        "server": args.server,
        "tokens": args.tokens,
        "ttfb_tokens": args.ttfb_tokens,
        "repeat": args.repeat,
        "stat": args.stat,
        "servers": {},
    }
    django = targets.get("django")
    d_rate = summary(django.rates, args.stat, True) if django else float("nan")
    d_ttfb = statistics.median(django.ttfb) if django and django.ttfb else float("nan")
    soft = f"uvicorn + {args.loop} + httptools" if args.server == "uvicorn" else "daphne"
    out.append("")
    out.append(
        f"Server software: {soft}. Long reply: {args.tokens} tokens; events/s = {args.stat} of "
        f"{args.repeat} run(s). TTFB: {args.ttfb_tokens}-token reply, median of "
        f"{args.repeat}x{args.ttfb_requests} requests after {args.warmup} warm-up."
    )
    header = (
        f"{'server':42} {'events/s':>9} {'x Django':>8} {'TTFB ms':>8} {'p90 ms':>7} {'x Django':>8} "
        f"{'1st event':>9} {'durable/s':>9} {'log lag s':>9}"
    )
    out.append(header)
    out.append("-" * len(header))
    for name in (*ALL_SERVERS, "whatif"):
        t = targets.get(name)
        if t is None:
            continue
        rate = summary(t.rates, args.stat, True)
        ttfb = statistics.median(t.ttfb) if t.ttfb else float("nan")
        p90 = sorted(t.ttfb)[int(0.9 * (len(t.ttfb) - 1))] if t.ttfb else float("nan")
        first = statistics.median(t.first_event) if t.first_event else float("nan")
        durable = summary(t.durable_rates, args.stat, True) if t.durable_rates else None
        lag = statistics.median(t.log_lag) if t.log_lag else None
        out.append(
            f"{LABELS[name]:42} {rate:9,.0f} {rate / d_rate:8.2f} {ttfb * 1e3:8.3f} {p90 * 1e3:7.3f} "
            f"{ttfb / d_ttfb:8.2f} {first * 1e3:9.3f} "
            f"{f'{durable:,.0f}' if durable else '-':>9} {f'{lag:.2f}' if lag is not None else '-':>9}"
        )
        data["servers"][name] = {
            "label": LABELS[name],
            "events_per_s": rate,
            "events_per_s_runs": t.rates,
            "frames": t.frames,
            "ttfb_ms_median": ttfb * 1e3,
            "ttfb_ms_p90": p90 * 1e3,
            "first_event_ms_median": first * 1e3,
            "rate_vs_django": rate / d_rate,
            "ttfb_vs_django": ttfb / d_ttfb,
            "durable_events_per_s": durable,
            "log_lag_s": lag,
        }
    if "whatif" in targets:
        out.append(
            f"  what-if = the full stack with bench-only prototypes of suggested changes: {args.whatif} "
            "(bench/servers.py)"
        )
    out.append(
        "  (events/s: SSE data frames / (last byte - request sent). TTFB: request sent -> first response byte; "
        "1st event: -> first data frame, ms."
    )
    out.append(
        "   durable/s: frames / (request sent -> run recorded, event log and run row written); "
        "log lag: last byte -> recorded.)"
    )
    out.append("")
    out.append(f"Targets: full stack >= {TARGET_RATE}x Django's events/s and TTFB <= {TARGET_TTFB}x Django's.")
    all_met = True
    for name in ("sdk", "scripted", "whatif"):
        entry = data["servers"].get(name)
        if entry is None or django is None:
            continue
        rate_ok = entry["rate_vs_django"] >= TARGET_RATE
        ttfb_ok = entry["ttfb_vs_django"] <= TARGET_TTFB
        all_met &= rate_ok and ttfb_ok
        entry["rate_target_met"], entry["ttfb_target_met"] = rate_ok, ttfb_ok
        out.append(
            f"  {LABELS[name]:44} events/s {entry['rate_vs_django']:.2f}x: {'MET' if rate_ok else 'MISSED'}; "
            f"TTFB {entry['ttfb_vs_django']:.2f}x: {'MET' if ttfb_ok else 'MISSED'}"
        )
    bare = data["servers"].get("bare")
    if bare and django:
        out.append(
            f"  (client check: the client read baseline 1 at {bare['events_per_s']:,.0f} events/s, "
            f"{bare['events_per_s'] / d_rate:.1f}x the Django view, so it is not what limits the others)"
        )
    data["all_targets_met"] = all_met
    return "\n".join(out), data


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=20_000, help="tokens (text deltas) of the long reply")
    parser.add_argument("--ttfb-tokens", type=int, default=10, help="tokens of the short reply timed for TTFB")
    parser.add_argument("--ttfb-requests", type=int, default=30, help="TTFB requests per repeat")
    parser.add_argument(
        "--ttfb-gap",
        type=float,
        default=0.005,
        help="idle seconds before each TTFB request, so the previous request's clean-up "
        "(Django's per-request thread) is not what is measured",
    )
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="do not wait for each Threadline run to be recorded before the next request "
        "(TTFB then includes contention with the previous run's log write)",
    )
    parser.add_argument("--warmup", type=int, default=5, help="warm-up requests per server")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each measures every server once")
    parser.add_argument("--stat", choices=["median", "best"], default="median", help="how repeats combine (events/s)")
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="uvicorn's event loop (uvloop is what the targets are measured on)",
    )
    parser.add_argument(
        "--only", default=",".join(ALL_SERVERS), help="comma-separated subset of " + ",".join(ALL_SERVERS)
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (fewer tokens, requests and repeats)")
    parser.add_argument(
        "--profile",
        choices=["off", "py-spy", "cprofile"],
        default="off",
        help="after the table, profile the full stack while it streams long replies",
    )
    parser.add_argument("--profile-streams", type=int, default=5)
    parser.add_argument("--profile-rate", type=int, default=1000, help="py-spy samples per second")
    parser.add_argument(
        "--profile-nonblocking",
        action="store_true",
        help="py-spy samples without pausing the server: less overhead, but some stacks come out cut short",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="after the table, time the phases before the first byte of the full stack",
    )
    parser.add_argument(
        "--whatif",
        default="",
        help="also measure the scripted full stack with bench-only prototypes of suggested changes: "
        "comma-separated from fast-log, agent-cache, lean-open, db-thread (see bench/servers.py)",
    )
    parser.add_argument(
        "--whatif-model", choices=["scripted", "sdk"], default="scripted", help="the model the what-if server uses"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, databases)")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens = min(args.tokens, 5_000)
        args.ttfb_requests = min(args.ttfb_requests, 10)
        args.warmup = min(args.warmup, 3)
        args.repeat = 1
        args.profile_streams = min(args.profile_streams, 2)
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = set(args.only) - set(ALL_SERVERS)
    if unknown:
        parser.error(f"unknown server(s) in --only: {', '.join(sorted(unknown))}")
    bad = {w.strip() for w in args.whatif.split(",") if w.strip()} - {
        "fast-log",
        "agent-cache",
        "lean-open",
        "db-thread",
    }
    if bad:
        parser.error(f"unknown --whatif prototype(s): {', '.join(sorted(bad))}")
    if args.profile == "py-spy" and not find_py_spy():
        parser.error(
            "py-spy not found: pip install --target /tmp/pyspy py-spy (or set PY_SPY), or use --profile cprofile"
        )
    return args


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tmp = Path(tempfile.mkdtemp(prefix="threadline-bench-"))
        self.procs: list[ServerProc] = []
        self.fakes: list[FakeModel] = []

    def close(self) -> None:
        for proc in self.procs:
            try:
                proc.stop()
            except Exception as exc:  # keep cleaning up
                print(f"warning: could not stop {proc.name}: {exc}", file=sys.stderr)
        for fake in self.fakes:
            try:
                fake.stop()
            except Exception as exc:
                print(f"warning: could not stop FakeAnthropic: {exc}", file=sys.stderr)
        if self.args.keep:
            print(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def fake(self) -> FakeModel:
        fake = FakeModel(base_env(), self.tmp / f"fake-{len(self.fakes)}.log")
        self.fakes.append(fake)
        return fake

    def target(
        self, name: str, data_dirs: dict[str, Path], extra_env: dict[str, str] | None = None, tag: str = ""
    ) -> Target:
        fake = None
        if name == "bare":
            env, kind = base_env(), "bare"
        elif name == "django":
            env, kind = base_env() | {"BENCH_TMP": str(self.tmp)}, "django"
        elif name == "sdk" or (name == "whatif" and self.args.whatif_model == "sdk"):
            fake = self.fake()
            env, kind = threadline_env(self.tmp, data_dirs[name], fake.base_url), "threadline"
        else:
            env, kind = threadline_env(self.tmp, data_dirs[name], None), "threadline-scripted"
        if name == "whatif":
            env["BENCH_WHATIF"] = self.args.whatif
        env |= extra_env or {}
        proc = ServerProc(name, kind, env, self.args.server, self.tmp / f"server-{name}{tag}.log", self.args.loop)
        self.procs.append(proc)
        proc.start()
        db_path = Path(env["THREADLINE_DATA_DIR"]) / "threadline.sqlite3" if "THREADLINE_DATA_DIR" in env else None
        return Target(name, proc, fake, db_path=db_path, settle=not self.args.no_settle)

    async def run(self) -> int:
        args = self.args
        names = [n for n in ALL_SERVERS if n in args.only] + (["whatif"] if args.whatif else [])
        t_start = CLOCK()
        full = [n for n in names if n in ("sdk", "scripted", "whatif")]
        extra = []
        if args.profile != "off":
            extra += [f"profile-{n}" for n in full]
        traced = [n for n in ("scripted", "whatif") if n in names] if args.breakdown else []
        extra += [f"breakdown-{n}" for n in traced]
        data_dirs = prepare_threadline(self.tmp, full + extra) if full or extra else {}
        targets = {name: self.target(name, data_dirs) for name in names}
        for target in targets.values():
            await wait_ready(target)
        clients = {name: Client(t.proc.port) for name, t in targets.items()}
        print(f"servers up in {CLOCK() - t_start:.1f}s ({args.server}); warming up", flush=True)
        for name, target in targets.items():
            await target.warm_up(clients[name], args.ttfb_tokens, args.warmup)
        for round_no in range(args.repeat):
            for name, target in targets.items():
                await target.measure_stream(clients[name], args.tokens)
                await target.measure_ttfb(clients[name], args.ttfb_tokens, args.ttfb_requests, args.ttfb_gap)
            line = ", ".join(
                f"{n} {t.rates[-1]:,.0f}/s {statistics.median(t.ttfb[-args.ttfb_requests :]) * 1e3:.2f}ms"
                for n, t in targets.items()
            )
            print(f"round {round_no + 1}/{args.repeat}: {line}", flush=True)
        for client in clients.values():
            client.close()
        for target in targets.values():
            target.proc.stop()
        LABELS["whatif"] = f"what-if prototypes ({args.whatif_model} model)"
        text, data = report(targets, args)
        print(text, flush=True)
        if args.profile != "off":
            data["profile"] = {}
            for name in full:
                data["profile"][name] = await self.profile(name, data_dirs)
        if traced:
            data["ttfb_breakdown"] = {n: await self.breakdown(data_dirs, n) for n in traced}
        print(f"\ntotal time {CLOCK() - t_start:.1f}s", flush=True)
        if args.json:
            args.json.write_text(json.dumps(data, indent=2))
        if args.check and not data.get("all_targets_met"):
            return 1
        return 0

    async def profile(self, name: str, data_dirs: dict[str, Path]) -> str:
        args = self.args
        out = self.tmp / f"profile-{name}.{'txt' if args.profile == 'py-spy' else 'pstats'}"
        extra = {"BENCH_PROFILE": str(out)} if args.profile == "cprofile" else {}
        dirs = dict(data_dirs, **{name: data_dirs[f"profile-{name}"]})
        target = self.target(name, dirs, extra, tag="-profile")
        await wait_ready(target)
        client = Client(target.proc.port)
        await target.warm_up(client, args.ttfb_tokens, args.warmup)
        print(f"\nProfile of {LABELS[name]} ({args.profile}) while streaming:", flush=True)
        text = await profile_streams(
            target,
            client,
            args.tokens,
            args.profile_streams,
            args.profile,
            out,
            args.profile_rate,
            args.profile_nonblocking,
        )
        client.close()
        target.proc.stop()
        if args.profile == "cprofile":
            events = args.profile_streams * (target.frames or args.tokens)
            text += "\n" + summarize_cprofile(out, events)
        print(text, flush=True)
        return text

    async def breakdown(self, data_dirs: dict[str, Path], name: str) -> str:
        """Where the full stack's TTFB goes: the phases of the request before its first byte."""
        args = self.args
        out = self.tmp / f"trace-{name}.json"
        dirs = dict(data_dirs, **{name: data_dirs[f"breakdown-{name}"]})
        target = self.target(name, dirs, {"BENCH_TRACE": str(out)}, tag="-trace")
        await wait_ready(target)
        client = Client(target.proc.port)
        await target.warm_up(client, args.ttfb_tokens, args.warmup)
        target.ttfb.clear()
        target.first_event.clear()
        await target.measure_ttfb(client, args.ttfb_tokens, max(args.ttfb_requests, 30), args.ttfb_gap)
        client.close()
        target.proc.stop()
        text = (
            f"\nTTFB breakdown, {LABELS[name]} (traced; the client saw a median TTFB of "
            f"{statistics.median(target.ttfb) * 1e3:.3f} ms with tracing on):\n" + summarize_trace(out)
        )
        print(text, flush=True)
        return text


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through Bench.close(), which stops every subprocess


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    bench = Bench(args)
    try:
        try:
            import uvloop

            return uvloop.run(bench.run())
        except ImportError:
            return asyncio.run(bench.run())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        bench.close()


if __name__ == "__main__":
    sys.exit(main())
