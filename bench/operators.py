"""``--operators N``: are the operators served while N replies stream at a model's pace?

One ``manage.py serve`` process (bench/servers.py ``serve``: the command itself, with the scripted
model) serves N runs at once, each streaming a token every ``--pace-ms`` (25 ms: 40 tokens/s, a
model's pace) until the bench stops them. While they stream, for ``--operators-seconds``, a
superuser's requests are timed one after another, in turn:

  admin        the admin's thread list (/admin/threads/thread/), logged in (a session cookie)
  api          /api/threads/ (the superuser's API token)
  agui-info    /agui/info (the AG-UI token)

and every stream's token arrivals are timestamped as they are read. The same requests are timed
on the idle server afterwards (the runs stopped and recorded, so the database holds the same
threads): the baseline. Printed: p50 and p99 of each, idle and under load; the gap between a
stream's tokens (p50, p99, the worst stream's p99) against the pace; the server's CPU per token.

Targets (issue #27 item 5): p99 < 250 ms for the admin list and /api/threads/, < 50 ms for
/agui/info, and the gap between tokens within 50 ms of the pace at p99.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import resource
import statistics
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from httpclient import CLOCK, Client
from openstreams import raise_own_file_limit
from processes import PYTHON, REPO, TOKEN, Lab, ServerProc
from profiling import start_py_spy, stop_py_spy, summarize_py_spy

# What the requests look like (the admin's and the API's credentials are made per run, see _operator).
ENDPOINTS = ("admin", "api", "agui-info")
TARGET_P99_MS = {"admin": 250.0, "api": 250.0, "agui-info": 50.0}
GAP_SLACK_MS = 50.0
PROFILE_RATE = 250  # py-spy's samples per second with --operators-profile
TOKEN_MARK = b"TEXT_MESSAGE_CONTENT"

# The superuser, its API token and an admin session, made in the server's database; printed as JSON.
_MAKE_OPERATOR = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
user = get_user_model().objects.create_superuser("bench-operator", "op@example.invalid", "bench-operator-pw")
client = Client()
assert client.login(username="bench-operator", password="bench-operator-pw")
print(json.dumps({"session": client.cookies["sessionid"].value, "token": Token.objects.create(user=user).key}))
"""


class _PacedStream(asyncio.Protocol):
    """One run's SSE response: the arrival time of each of its tokens (text deltas), and its end."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.head = b""
        self.carry = b""  # a token mark may straddle two reads
        self.tail = b""
        self.arrivals: list[float] = []
        self.first_token = loop.create_future()
        self.done = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        now = CLOCK()
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self.head.split(b" ", 2)[1])
            data, self.head = self.head[end + 4 :], b""
        seen = self.carry + data
        count = seen.count(TOKEN_MARK)
        if count:
            self.arrivals += [now] * count
            if not self.first_token.done():
                self.first_token.set_result(None)
        self.carry = seen[-(len(TOKEN_MARK) - 1) :]
        self.tail = (self.tail + data)[-512:]
        if self.tail.endswith(b"0\r\n\r\n"):
            self._end(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(ConnectionError(f"connection lost: {exc}"))

    def _end(self, error: Exception | None) -> None:
        for future in (self.first_token, self.done):
            if not future.done():
                if error is None and future is self.done:
                    future.set_result(None)
                else:
                    future.set_exception(error or ConnectionError("ended before its first token"))
                    future.exception()  # retrieved: an unawaited failure is not logged twice
        if self.transport is not None:
            self.transport.close()

    @property
    def finished_cleanly(self) -> bool:
        return self.status == 200 and self.done.done() and not self.done.exception() and b"RUN_FINISHED" in self.tail


def _run_request(port: int, pace_ms: int, tokens: int = 0) -> bytes:
    """A run's request whose message asks for a token every ``pace_ms`` (and ``tokens`` of them)."""
    content = f"paced bench-slow={pace_ms}" + (f" bench-tokens={tokens}" if tokens else "")
    body = json.dumps(
        {
            "threadId": f"t-ops-{uuid.uuid4().hex}",
            "runId": f"r-ops-{uuid.uuid4().hex}",
            "messages": [{"id": f"m-{uuid.uuid4().hex}", "role": "user", "content": content}],
            "tools": [],
            "context": [],
            "state": {},
            "forwardedProps": {},
        }
    ).encode()
    head = (
        f"POST /agui/coder HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@dataclass
class Operator:
    """The superuser's clients, one keep-alive connection per endpoint, as a browser tab or a script has."""

    port: int
    session: str
    api_token: str
    clients: dict[str, Client] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.clients = {name: Client(self.port) for name in ENDPOINTS}

    def request(self, name: str) -> tuple[str, str, dict[str, str]]:
        if name == "admin":
            return "GET", "/admin/threads/thread/", {"Cookie": f"sessionid={self.session}", "Accept": "text/html"}
        if name == "api":
            return "GET", "/api/threads/", {"Authorization": f"Token {self.api_token}", "Accept": "application/json"}
        return "GET", "/agui/info", {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}

    async def time(self, name: str) -> float:
        method, path, headers = self.request(name)
        started = CLOCK()
        response = await self.clients[name].request(method, path, b"", headers, within=60)
        took = (CLOCK() - started) * 1e3
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}: {response.body[:200]!r}")
        return took

    async def time_rounds(self, until: float, gap: float, into: dict[str, list[float]]) -> None:
        """Each endpoint in turn, ``gap`` seconds apart, until CLOCK() passes ``until``."""
        while CLOCK() < until:
            for name in ENDPOINTS:
                await asyncio.sleep(gap)
                into[name].append(await self.time(name))

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _operator(server: ServerProc) -> Operator:
    done = subprocess.run(
        [PYTHON, "manage.py", "shell", "-c", _MAKE_OPERATOR],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"could not make the bench's superuser:\n{done.stdout}\n{done.stderr}")
    made = json.loads(done.stdout.strip().splitlines()[-1])
    return Operator(server.port, made["session"], made["token"])


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def _quiet(pid: int, within: float = 60.0) -> None:
    """Until the process uses under 5% of a core over half a second (or ``within`` seconds pass)."""
    deadline = CLOCK() + within
    while CLOCK() < deadline:
        before = _cpu_seconds(pid)
        await asyncio.sleep(0.5)
        if _cpu_seconds(pid) - before < 0.025:
            return


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _machine() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of the machine, from /proc/stat."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, sum(values)


def _percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


@dataclass
class OperatorsResult:
    streams: int
    pace_ms: int
    window_s: float = 0.0
    idle_ms: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in ENDPOINTS})
    load_ms: dict[str, list[float]] = field(default_factory=lambda: {name: [] for name in ENDPOINTS})
    gaps_ms: list[float] = field(default_factory=list)
    stream_p99_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    cpu_s: float = 0.0
    client_cpu_s: float = 0.0  # this process's, measuring
    machine_busy_cores: float = 0.0  # every process's, the server and this one included
    idle_cpu_per_request_ms: float = 0.0
    errors: list[str] = field(default_factory=list)
    profile: str = ""


async def _open_streams(port: int, count: int, pace_ms: int, batch: int = 50) -> list[_PacedStream]:
    loop = asyncio.get_running_loop()
    opened: list[_PacedStream] = []
    while len(opened) < count:
        fresh = []
        for _ in range(min(batch, count - len(opened))):
            _, stream = await loop.create_connection(_PacedStream, "127.0.0.1", port)
            assert stream.transport is not None
            stream.transport.write(_run_request(port, pace_ms))
            fresh.append(stream)
        opened += fresh
        await asyncio.wait_for(asyncio.gather(*(s.first_token for s in fresh)), 120)
    return opened


def _gaps(stream: _PacedStream, start: float, end: float) -> list[float]:
    times = [t for t in stream.arrivals if start <= t <= end]
    return [(b - a) * 1e3 for a, b in itertools.pairwise(times)]


async def measure_operators(
    lab: Lab,
    streams: int,
    pace_ms: int,
    seconds: float,
    gap: float = 0.02,
    idle_rounds: int = 60,
    profile_out: Path | None = None,
) -> OperatorsResult:
    """With ``profile_out``, py-spy samples the server through the measured window, without pausing
    it, but on the same CPUs: read the profile, not the timings, of such a run."""
    raise_own_file_limit(streams + 1024)
    # Every client of the bench comes from 127.0.0.1: the per-client cap would count them as one.
    server = lab.start("serve", {"SERVER_MAX_CONNECTIONS_PER_CLIENT": "0"}, tag="operators")
    await server.wait_answering("/agui/info", {"Authorization": f"Bearer {TOKEN}"})
    result = OperatorsResult(streams=streams, pace_ms=pace_ms)
    operator = _operator(server)
    stopper = Client(server.port)
    opened: list[_PacedStream] = []
    try:
        # Warm: the admin's templates, the API's serializers, a run or two; unmeasured.
        warm = await _open_streams(server.port, 2, pace_ms)
        for name in ENDPOINTS * 5:
            await operator.time(name)
        await stopper.request("POST", "/bench/slow/stop")
        await asyncio.wait([s.done for s in warm], timeout=60)
        await stopper.request("POST", "/bench/slow/start")

        opened = await _open_streams(server.port, streams, pace_ms)
        await asyncio.sleep(2.0)  # past the opening burst: every stream at its pace
        spy = start_py_spy(server.proc.pid, profile_out, PROFILE_RATE, nonblocking=True) if profile_out else None
        start, cpu_before, own_before, machine_before = CLOCK(), _cpu_seconds(server.proc.pid), _own_cpu(), _machine()
        try:
            await operator.time_rounds(start + seconds, gap, result.load_ms)
        finally:
            end, cpu_after = CLOCK(), _cpu_seconds(server.proc.pid)
            result.client_cpu_s = _own_cpu() - own_before
            busy, total = (after - before for after, before in zip(_machine(), machine_before, strict=True))
            result.machine_busy_cores = busy / total * (os.cpu_count() or 1) if total else float("nan")
            if spy is not None:
                stop_py_spy(spy)
        server.check_alive()
        result.window_s = end - start
        result.cpu_s = cpu_after - cpu_before
        for stream in opened:
            gaps = _gaps(stream, start, end)
            result.tokens += len(gaps)
            result.gaps_ms += gaps
            if gaps:
                result.stream_p99_ms.append(_percentile(gaps, 99))
            else:
                result.errors.append("a stream got no token in the measured window")
        if profile_out is not None:
            result.profile = summarize_py_spy(profile_out, result.tokens, top=40, rate=PROFILE_RATE)
    except Exception as exc:
        result.errors.append(f"under load: {exc!r}")
    finally:
        await stopper.request("POST", "/bench/slow/stop")
        if opened:
            await asyncio.wait([s.done for s in opened], timeout=300)
        for stream in opened:
            if not stream.finished_cleanly:
                result.errors.append(f"a stream ended with status {stream.status}, tail {stream.tail[-120:]!r}")
        stopper.close()
    try:
        await _quiet(server.proc.pid)  # the runs recorded: the server idle, its database as under load
        cpu_before = _cpu_seconds(server.proc.pid)
        for _ in range(idle_rounds):
            for name in ENDPOINTS:
                await asyncio.sleep(gap)
                result.idle_ms[name].append(await operator.time(name))
        result.idle_cpu_per_request_ms = (_cpu_seconds(server.proc.pid) - cpu_before) * 1e3 / (idle_rounds * 3)
    except Exception as exc:
        result.errors.append(f"idle: {exc!r}")
    finally:
        operator.close()
        server.stop()
    return result


def operators_report(result: OperatorsResult, database: str) -> tuple[str, dict[str, Any]]:
    """The figures of one operators measurement and the verdict on the targets."""
    lines = [
        f"Operators under load: {result.streams} streams at {1000 / result.pace_ms:.0f} tokens/s each "
        f"on one manage.py serve process ({database}), {result.window_s:.0f} s measured",
        f"  {'request':28} {'idle p50':>9} {'idle p99':>9} {'load p50':>9} {'load p99':>9} {'p99 ratio':>9}  target",
    ]
    data: dict[str, Any] = {"streams": result.streams, "pace_ms": result.pace_ms, "database": database}
    targets: dict[str, bool] = {}
    labels = {"admin": "admin thread list", "api": "/api/threads/", "agui-info": "/agui/info"}
    for name in ENDPOINTS:
        idle, load = result.idle_ms[name], result.load_ms[name]
        figures = {
            "idle_p50": _percentile(idle, 50),
            "idle_p99": _percentile(idle, 99),
            "load_p50": _percentile(load, 50),
            "load_p99": _percentile(load, 99),
            "load_max": max(load, default=float("nan")),
            "requests": len(load),
        }
        data[name] = figures
        goal = TARGET_P99_MS[name]
        ok = figures["load_p99"] < goal
        targets[f"{labels[name]} p99 < {goal:.0f} ms"] = ok
        lines.append(
            f"  {labels[name]:28} {figures['idle_p50']:7.1f}ms {figures['idle_p99']:7.1f}ms "
            f"{figures['load_p50']:7.1f}ms {figures['load_p99']:7.1f}ms "
            f"{figures['load_p99'] / figures['idle_p99']:8.1f}x  < {goal:.0f} ms: {'MET' if ok else 'MISSED'} "
            f"({len(load)} requests, max {figures['load_max']:.0f} ms)"
        )
    limit = result.pace_ms + GAP_SLACK_MS
    gap_p50, gap_p99 = _percentile(result.gaps_ms, 50), _percentile(result.gaps_ms, 99)
    worst = max(result.stream_p99_ms, default=float("nan"))
    over = sum(1 for p in result.stream_p99_ms if p > limit)
    ok = gap_p99 <= limit
    targets[f"gap between tokens p99 <= {limit:.0f} ms"] = ok
    rate = result.tokens / result.window_s / max(1, result.streams) if result.window_s else float("nan")
    lines.append(
        f"  gap between tokens (pace {result.pace_ms} ms): p50 {gap_p50:.1f} ms, p99 {gap_p99:.1f} ms, "
        f"max {max(result.gaps_ms, default=float('nan')):.0f} ms; worst stream's p99 {worst:.1f} ms, "
        f"{over} of {len(result.stream_p99_ms)} streams' p99 over {limit:.0f} ms  (<= {limit:.0f} ms: "
        f"{'MET' if ok else 'MISSED'})"
    )
    # The streams' share of the CPU: the window's less what the operators' requests cost when idle.
    requests = sum(len(times) for times in result.load_ms.values())
    streams_cpu = result.cpu_s - requests * result.idle_cpu_per_request_ms / 1e3
    cpu_per_token = streams_cpu * 1e6 / result.tokens if result.tokens else float("nan")
    lines.append(
        f"  tokens: {rate:.1f}/s per stream; server CPU {result.cpu_s / max(result.window_s, 1e-9) * 100:.0f}% "
        f"of a core; {cpu_per_token:.0f} us CPU per token (the operators' {requests} requests at their idle "
        f"cost, {result.idle_cpu_per_request_ms:.1f} ms each, taken off)"
    )
    window = max(result.window_s, 1e-9)
    lines.append(
        f"  the machine meanwhile: {result.machine_busy_cores:.2f} of {os.cpu_count()} cores busy, the bench's client "
        f"{result.client_cpu_s / window * 100:.0f}% of a core; load average {os.getloadavg()[0]:.1f}"
    )
    targets["0 errors"] = not result.errors
    lines.append(f"  errors: {len(result.errors)}" + (f" (first: {result.errors[0]})" if result.errors else ""))
    lines.append("  targets: " + "; ".join(f"{name}: {'MET' if ok else 'MISSED'}" for name, ok in targets.items()))
    if result.profile:
        lines.append("  profile of the server while measured (py-spy; per token):\n" + result.profile)
    data |= {
        "gap_p50_ms": gap_p50,
        "gap_p99_ms": gap_p99,
        "worst_stream_gap_p99_ms": worst,
        "tokens_per_s_per_stream": rate,
        "cpu_us_per_token": cpu_per_token,
        "server_cpu_share": result.cpu_s / window,
        "client_cpu_share": result.client_cpu_s / window,
        "machine_busy_cores": result.machine_busy_cores,
        "errors": len(result.errors),
        "targets": targets,
    }
    return "\n".join(lines), data
