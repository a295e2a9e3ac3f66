"""Streams at a model's pace on the production path (issue #50), against a bare ASGI app.

    .venv/bin/python bench/paced.py                   # 200 streams (make bench)
    .venv/bin/python bench/paced.py --streams 1000
    DATABASE_URL=postgresql://... .venv/bin/python bench/paced.py   # the full stack on PostgreSQL
    .venv/bin/python bench/paced.py --profile /tmp/paced.txt        # and py-spy on the server

Three servers, each pinned to the same core (``taskset``, ``--core``), measured one after the other
in the same run:

  bare        a bare ASGI app under uvicorn (uvloop, httptools; bench/servers.py ``bare``) sending
              the same paced tokens, one send each (frame k due at the start + k * pace)
  relay       the bare app with its tokens read from the paced model (bench/servers.py ``relay``):
              a frame sent for each text delta a read brings, nothing parsed or logged; the least
              any server streaming a model's reply does a token, one read and one send
  threadline  ``manage.py serve`` as ``make run`` starts it, the real ``anthropic`` SDK reading from
              a fake model that paces each SSE event (bench/paced_model.py: FakeAnthropic's replies,
              event k due at its start + k * pace, whether the reader keeps up or not)

Each gets N streams of ``--tokens`` tokens, one every ``--pace-ms`` (800 at 25 ms: 40 tokens/s),
their starts spread over ``--ramp`` seconds as people's are. This process (the clients) and the
fake model run on the other cores. Printed for each: the server's CPU per token from /proc (the
whole measurement, run starts and ends included, and the steady window where the streams are
open: from 95% of them started to 5% of them done) and per stream (with ``--tokens 10``, mostly
what a run's start and end cost), the gap between a stream's tokens as the
clients read them (p50, p99, max, the worst stream's p99), how long the streams took against
their paced length, and whether they kept their pace (gap p99 within 50 ms of the pace and no
stream more than 5% late); then the ratio of Threadline's CPU per token to the bare app's, and
the relay's to both. Targets (#50): at most 1.5x the bare app, and the pace kept.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from httpclient import CLOCK
from measure import Target
from openstreams import raise_own_file_limit
from operators import _cpu_seconds, _PacedStream, _quiet, _run_request
from processes import BENCH, PYTHON, REPO, FakeModel, Lab, ServerProc, base_env
from profiling import start_py_spy, stop_py_spy, summarize_py_spy

GAP_SLACK_MS = 50.0
LABELS = {
    "bare": "bare ASGI app (uvicorn)",
    "relay": "relay (bare, reads the model)",
    "threadline": "Threadline (manage.py serve, SDK)",
}
LATE_SHARE = 0.05  # a stream that takes 5% longer than its paced length fell behind
TARGET_RATIO = 1.5
PROFILE_RATE = 250


@dataclass
class Paced:
    """One server's paced streams and what they cost."""

    label: str
    streams: list[_PacedStream] = field(default_factory=list)
    cpu_s: float = 0.0  # the whole measurement: first request to the server quiet again
    wall_s: float = 0.0
    steady_cpu_s: float = 0.0
    steady_tokens: int = 0
    steady_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    profile: Path | None = None  # py-spy's samples of the measurement
    first_token_s: list[float] = field(default_factory=list)  # request -> its first token, per stream

    @property
    def tokens(self) -> int:
        return sum(len(s.arrivals) for s in self.streams)

    def gaps_ms(self) -> list[list[float]]:
        return [[(b - a) * 1e3 for a, b in itertools.pairwise(s.arrivals)] for s in self.streams]


class PacedModel(FakeModel):
    """bench/paced_model.py in its own process (on the clients' cores): the model at its pace."""

    def __init__(self, log_path: Path) -> None:
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [PYTHON, str(BENCH / "paced_model.py")],
            cwd=REPO,
            env=base_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().decode().strip()
        if not self.base_url.startswith("http://"):
            raise RuntimeError(f"bench/paced_model.py did not start (said {self.base_url!r}); see {log_path}")


def pin(pid: int, cores: str) -> None:
    """Every thread of ``pid`` (and so the ones it starts later) onto ``cores``."""
    subprocess.run(["taskset", "-a", "-p", "-c", cores, str(pid)], check=True, capture_output=True)


def _bare_request(port: int, tokens: int, pace_ms: int) -> bytes:
    body = json.dumps({"threadId": "t", "runId": f"r-{uuid.uuid4().hex}", "messages": []}).encode()
    head = (
        f"POST /stream?n={tokens}&pace={pace_ms} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _cpu_sampler(pid: int, into: list[tuple[float, float]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        into.append((CLOCK(), _cpu_seconds(pid)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.2)


def _cpu_at(samples: list[tuple[float, float]], when: float) -> float:
    """The process's CPU seconds at ``when``, interpolated between the samples around it."""
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t0 <= when <= t1:
            return c0 + (c1 - c0) * (when - t0) / (t1 - t0) if t1 > t0 else c0
    return samples[-1][1] if when > samples[-1][0] else samples[0][1]


async def measure(server: ServerProc, args: argparse.Namespace, label: str, profile: Path | None) -> Paced:
    """``args.streams`` paced streams on ``server``, their starts spread over ``args.ramp`` seconds."""
    result = Paced(label)
    threadline = server.name == "sdk"
    await _quiet(server.proc.pid)
    loop = asyncio.get_running_loop()
    samples: list[tuple[float, float]] = []
    stop = asyncio.Event()
    sampler = asyncio.create_task(_cpu_sampler(server.proc.pid, samples, stop))
    asked = [0.0] * args.streams  # when each stream was asked for

    async def one(i: int) -> _PacedStream:
        await asyncio.sleep(max(0.0, started + args.ramp * i / args.streams - CLOCK()))
        asked[i] = CLOCK()
        _, stream = await loop.create_connection(_PacedStream, "127.0.0.1", server.port)
        assert stream.transport is not None
        if threadline:
            stream.transport.write(_run_request(server.port, args.pace_ms, args.tokens))
        else:
            stream.transport.write(_bare_request(server.port, args.tokens, args.pace_ms))
        return stream

    spy = None
    if profile is not None:
        await asyncio.sleep(args.ramp)
        spy = start_py_spy(server.proc.pid, profile, PROFILE_RATE, nonblocking=True)
    started = CLOCK()  # after py-spy's start: the streams start over the ramp, not all at once
    opened = await asyncio.gather(*(one(i) for i in range(args.streams)))
    result.streams = list(opened)
    budget = args.ramp + args.tokens * args.pace_ms / 1000 * 3 + 120
    await asyncio.wait([s.done for s in opened], timeout=budget)
    if spy is not None:
        stop_py_spy(spy)
    ended = CLOCK()
    await _quiet(server.proc.pid)  # the runs recorded: their ends count
    stop.set()
    await sampler
    result.wall_s = ended - started
    result.first_token_s = [s.arrivals[0] - t for s, t in zip(opened, asked, strict=True) if s.arrivals]
    result.cpu_s = _cpu_seconds(server.proc.pid) - samples[0][1]
    for stream in opened:
        if len(stream.arrivals) != args.tokens or stream.status != 200:
            result.errors.append(f"a stream got {len(stream.arrivals)} tokens, status {stream.status}")
        elif threadline and not stream.finished_cleanly:
            result.errors.append(f"a run did not finish cleanly: {stream.tail[-160:]!r}")
    # The steady window: from when 95% of the streams have their first token to when 5% are done.
    firsts = sorted(s.arrivals[0] for s in opened if s.arrivals)
    lasts = sorted(s.arrivals[-1] for s in opened if s.arrivals)
    if firsts and firsts[int(0.95 * (len(firsts) - 1))] < lasts[int(0.05 * (len(lasts) - 1))]:
        low, high = firsts[int(0.95 * (len(firsts) - 1))], lasts[int(0.05 * (len(lasts) - 1))]
        result.steady_s = high - low
        result.steady_tokens = sum(1 for s in opened for t in s.arrivals if low <= t <= high)
        result.steady_cpu_s = _cpu_at(samples, high) - _cpu_at(samples, low)
    result.profile = profile
    return result


def _q(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(results: list[Paced], args: argparse.Namespace, database: str) -> str:
    paced_s = (args.tokens - 1) * args.pace_ms / 1000
    limit = args.pace_ms + GAP_SLACK_MS
    lines = [
        f"Paced streams: {args.streams} x {args.tokens} tokens at {1000 / args.pace_ms:.0f}/s "
        f"({paced_s:.1f} s each), starts over {args.ramp:.0f} s; servers on core {args.core}, clients and "
        f"fake model on {args.client_cores}; Threadline on {database}",
        f"  {'server':34} {'CPU/token':>9} {'steady':>9} {'gap p50':>8} {'p99':>7} {'max':>7} {'worst p99':>9} "
        f"{'span p50':>8} {'max':>7}  kept pace",
    ]
    per_token: dict[str, float] = {}
    kept_pace: dict[str, bool] = {}
    for r in results:
        gaps = r.gaps_ms()
        flat = [g for stream in gaps for g in stream]
        worst = max((_q(g, 99) for g in gaps if g), default=float("nan"))
        spans = [s.arrivals[-1] - s.arrivals[0] for s in r.streams if len(s.arrivals) > 1]
        p99 = _q(flat, 99)
        late = sum(1 for span in spans if span > paced_s * (1 + LATE_SHARE))
        kept = p99 <= limit and not late and not r.errors
        all_us = r.cpu_s * 1e6 / max(r.tokens, 1)
        steady_us = r.steady_cpu_s * 1e6 / r.steady_tokens if r.steady_tokens else float("nan")
        per_token[r.label] = steady_us
        kept_pace[r.label] = kept
        lines.append(
            f"  {r.label:34} {all_us:7.1f}us {steady_us:7.1f}us {_q(flat, 50):6.1f}ms {p99:5.1f}ms "
            f"{max(flat, default=float('nan')):5.0f}ms {worst:7.1f}ms {statistics.median(spans) if spans else 0:7.2f}s "
            f"{max(spans, default=0):6.2f}s  {'yes' if kept else 'NO'}"
            + (f" ({late} streams >{LATE_SHARE:.0%} late)" if late else "")
            + (f"; {len(r.errors)} errors, first: {r.errors[0]}" if r.errors else "")
        )
        if r.profile is not None and r.profile.exists():
            lines.append(summarize_py_spy(r.profile, r.tokens, top=45, rate=PROFILE_RATE))
        first = r.first_token_s
        lines.append(
            f"  {'':34} first token after {_q(first, 50) * 1e3:.0f} ms (p50), {_q(first, 99) * 1e3:.0f} ms (p99); "
            f"{r.tokens} tokens in {r.wall_s:.1f} s; server CPU {r.cpu_s:.2f} s, "
            f"{r.cpu_s * 1e3 / max(len(r.streams), 1):.2f} ms a stream "
            f"({r.steady_s:.1f} s steady at {r.steady_cpu_s / max(r.steady_s, 1e-9):.0%} of a core)"
        )
    bare, relay, threadline = (per_token.get(r.label, float("nan")) for r in results[:3])
    ratio = threadline / bare if bare else float("nan")
    # A server behind its pace reads several tokens a read and sends them in one write: its CPU
    # per token falls as it fails. The ratio holds only when every server kept its pace.
    verdict = "MET" if ratio <= TARGET_RATIO else "MISSED"
    if not all(kept_pace.values()):
        verdict = "MISSED: a server fell behind its pace, so its CPU per token is not comparable"
    lines.append(
        f"  CPU per token, steady, Threadline / bare: {ratio:.2f}x (target <= {TARGET_RATIO}x: {verdict}); "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    lines.append(
        f"  the floor of reading a model, a read and a send a token (relay / bare): {relay / bare:.2f}x; "
        f"Threadline / relay: {threadline / relay:.2f}x"
    )
    return "\n".join(lines)


async def run(args: argparse.Namespace, lab: Lab) -> int:
    raise_own_file_limit(args.streams * 2 + 1024)
    model = PacedModel(lab.tmp / "paced-model.log")
    lab.fakes.append(model)  # stopped with the lab's
    # The Threadline server counts every client of the bench (all 127.0.0.1) as one: no per-client cap.
    extra = {"SERVER_MAX_CONNECTIONS_PER_CLIENT": "0", "ANTHROPIC_BASE_URL": model.base_url}
    threadline = lab.start("sdk", extra, tag="paced", serve=True)
    bare = lab.start("bare")
    relay = lab.start("relay", {"BENCH_MODEL_URL": model.base_url})
    for server in (threadline, bare, relay):
        pin(server.proc.pid, str(args.core))
    targets = {"bare": Target(bare), "relay": Target(relay), "threadline": Target(threadline)}
    for target in targets.values():
        await target.wait_ready()
        pin(target.server.proc.pid, str(args.core))  # the threads started since, too
        await target.warm_up(10, 5)
    database = "PostgreSQL" if lab.database_url else "SQLite"
    results: dict[str, list[Paced]] = {name: [] for name in LABELS}
    for round_ in range(args.rounds):
        for name, label in LABELS.items():
            server = targets[name].server
            profile = args.profile if name == "threadline" and round_ == args.rounds - 1 else None
            results[name].append(await measure(server, args, label, profile))
    for target in targets.values():
        target.close()
    out = []
    for i in range(args.rounds):
        out.append(report([results[name][i] for name in LABELS], args, database))
    print("\n".join(out), flush=True)
    return 0 if all(not r.errors for rs in results.values() for r in rs) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200, help="streams at once (1000: the issue's target)")
    parser.add_argument("--tokens", type=int, default=800, help="tokens of each stream")
    parser.add_argument("--pace-ms", type=int, default=25, help="ms between a stream's tokens (25: 40 tokens/s)")
    parser.add_argument("--ramp", type=float, default=5.0, help="seconds over which the streams start")
    parser.add_argument("--rounds", type=int, default=1, help="bare then Threadline, this many times")
    parser.add_argument("--core", type=int, default=0, help="the core both servers are pinned to")
    parser.add_argument("--profile", type=Path, help="py-spy the Threadline server into this file (last round)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and databases")
    args = parser.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0) - {args.core})
    if not cores:
        raise SystemExit("bench/paced.py needs two cores: the servers' and the clients'")
    args.client_cores = ",".join(map(str, cores))
    # The clients, and the fake model started from here, keep off the servers' core.
    os.sched_setaffinity(0, cores)
    lab = Lab("uvicorn", "uvloop", args.keep, database_url=os.environ.get("DATABASE_URL", ""))
    try:
        # uvloop: at 1,000 streams the clients read 40,000 frames a second, which asyncio's own loop
        # could not on a shared core (their lag showed as the servers' gaps).
        return uvloop.run(run(args, lab))
    finally:
        lab.close()


if __name__ == "__main__":
    sys.exit(main())
