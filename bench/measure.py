"""What the bench measures on one server, and the checks that every measured response is right.

  events/s   SSE data frames of one long reply / (last byte - request sent)
  TTFB       request sent -> first response byte of a short reply (also: -> first data frame)
  durable/s  (Threadline only) frames / (request sent -> the run recorded in the database:
             its event log written and the run finished)
  log lag    (Threadline only) last byte -> the run recorded

Threadline requests are made on an idle server: before each request the bench
waits until the previous run is recorded, so a TTFB does not include the
previous run's log write. It asks on one database connection per server, kept
for the whole run: a new PostgreSQL connection per request started a backend
process each time, whose start and exit took the CPU the next request's TTFB
was measured on (0.2 to 0.4 ms of the TTFB on PostgreSQL, which SQLite lacked).
Every Threadline request opens a new thread and run, as a user's new
conversation does.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from httpclient import CLOCK, Client, Response, count_frames
from processes import FULL_STACK, TOKEN, ServerProc
from procfigures import proc_figures


@dataclass
class Target:
    """One server under test and what was measured on it (seconds; rates in events/s)."""

    server: ServerProc
    settle: bool = True  # wait for each Threadline run to be recorded before the next request
    rates: list[float] = field(default_factory=list)
    durable_rates: list[float] = field(default_factory=list)
    log_lag: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    first_event: list[float] = field(default_factory=list)
    frames: int = 0  # SSE data frames of the long reply
    rss_first: float = 0.0  # RSS (MiB) after the first short reply
    rss_warm: float = 0.0  # RSS (MiB) after the warm-up

    def __post_init__(self) -> None:
        self.name = self.server.name
        self.is_threadline = self.name in FULL_STACK
        self.client = Client(self.server.port)
        self._records: RunRecords | None = None

    def close(self) -> None:
        """Closes the bench's connections to the server and its database (the server keeps running)."""
        self.client.close()
        if self._records is not None:
            self._records.close()
            self._records = None

    async def wait_ready(self, within: float = 90.0) -> None:
        """Until the server answers; a request sent early waits in the listening socket's backlog."""
        deadline = time.monotonic() + within
        path = "/agui/info" if self.is_threadline else "/stream?n=1"
        headers = {"Authorization": f"Bearer {TOKEN}"} if self.is_threadline else {}
        while True:
            self.server.check_alive()
            client = Client(self.server.port)
            try:
                response = await client.request("GET", path, b"", headers, within=max(1.0, deadline - time.monotonic()))
                if response.status != 200:
                    raise RuntimeError(f"{self.name}: readiness request got HTTP {response.status}: {response.body!r}")
                return
            except (TimeoutError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"server {self.name} did not become ready; its log ends:\n{self.server.log_tail()}"
                    ) from None
                await asyncio.sleep(0.1)
            finally:
                client.close()

    async def warm_up(self, short: int, count: int) -> None:
        """``count`` short replies and one of 1000 tokens, unmeasured: imports, caches and connections warm."""
        self.queue_replies(f"text {short} {count}")
        for i in range(count):
            await self.request(short)
            if i == 0:
                self.rss_first = self.memory()[0]
        self.queue_replies("bench 1000")
        await self.request(1000)
        self.rss_warm = self.memory()[0]

    def memory(self) -> tuple[float, float]:
        """The server's (RSS, peak RSS) in MiB."""
        _, _, rss, peak = proc_figures(self.server.proc.pid)
        return rss, peak

    async def measure_stream(self, tokens: int) -> None:
        """One long reply: events/s, and for Threadline durable/s and log lag."""
        self.queue_replies(f"bench {tokens}")
        response, frames, run_id = await self.request(tokens, settle=False)
        self.frames = frames
        self.rates.append(frames / response.elapsed)
        if self.is_threadline:
            when, event_count, stored = await self.recorded(run_id)
            if not event_count == stored == frames:
                raise RuntimeError(
                    f"{self.name}: {frames} frames streamed but the run recorded "
                    f"event_count={event_count} and {stored} events in its log"
                )
            self.durable_rates.append(frames / (when - response.t_sent))
            self.log_lag.append(when - (response.t_end or when))

    async def measure_concurrent(self, streams: int, tokens: int, timeline: bool = False) -> tuple[float, int]:
        """``streams`` replies of ``tokens`` tokens at once, each on its own connection: the aggregate
        events/s (all frames / first request sent -> last byte) and the count of failed streams.
        ``timeline``: also prints when the streams' first text and last byte came (see below)."""
        self.queue_replies(f"bench {tokens} {streams}")
        clients = [Client(self.server.port) for _ in range(streams)]
        try:
            results = await asyncio.gather(
                *(self.request(tokens, settle=False, client=c) for c in clients), return_exceptions=True
            )
        finally:
            for client in clients:
                client.close()
        done = [r for r in results if not isinstance(r, BaseException)]
        errors = len(results) - len(done)
        if not done:
            raise RuntimeError(f"{self.name}: every concurrent stream failed: {results[0]!r}")
        started = min(response.t_sent for response, _, _ in done)
        ended = max(response.t_end or 0.0 for response, _, _ in done)
        frames = sum(count for _, count, _ in done)
        if timeline:
            print(f"    {self.name}: {_timeline([r for r, _, _ in done], started)}", flush=True)
        if self.is_threadline:
            for _, count, run_id in done:
                _, event_count, stored = await self.recorded(run_id)
                if not event_count == stored == count:
                    errors += 1
        return frames / (ended - started), errors

    async def measure_ttfb(self, tokens: int, count: int, gap: float) -> None:
        """``count`` sequential short replies: TTFB and time to first event of each."""
        self.queue_replies(f"text {tokens} {count}")  # all at once: no pipe round trip between requests
        for _ in range(count):
            # Idle first, so the previous request's clean-up (Django's per-request thread) is not measured.
            await asyncio.sleep(gap)
            response, _, _ = await self.request(tokens)
            self.ttfb.append(response.ttfb)
            self.first_event.append(response.first_event)

    def queue_replies(self, command: str) -> None:
        """Tells FakeAnthropic which replies to serve next (sdk only; the other servers read the token count
        from the request)."""
        if self.server.fake is not None:
            self.server.fake.command(command)

    async def request(
        self, tokens: int, settle: bool = True, client: Client | None = None
    ) -> tuple[Response, int, str]:
        """One streamed reply of ``tokens`` text deltas, checked; returns it, its frame count and its run id."""
        self.server.check_alive()
        if self.is_threadline:
            run_id = f"r-{uuid.uuid4().hex}"
            body = {
                "threadId": f"t-{uuid.uuid4().hex}",
                "runId": run_id,
                "messages": [
                    {"id": f"m-{uuid.uuid4().hex}", "role": "user", "content": f"Stream please. bench-tokens={tokens}"}
                ],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
                "protocolVersion": "1.0",
            }
            path, headers = "/agui/coder", {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        else:
            run_id = ""
            body = {"threadId": "t", "runId": "r", "messages": []}
            path, headers = f"/stream?n={tokens}", {"Content-Type": "application/json"}
        response = await (client or self.client).request("POST", path, json.dumps(body).encode(), headers)
        frames = self.check(response, tokens)
        if settle and self.settle and run_id:
            await self.recorded(run_id)
        return response, frames, run_id

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
            if self.name == "scripted" and b'"bench-scripted"' not in body:
                raise RuntimeError("scripted: the scripted provider is not the one serving the run")
        return count_frames(body)

    async def recorded(self, run_id: str, within: float = 120.0) -> tuple[float, int, int]:
        """Waits until the run is recorded as finished (its event log written, then run_finish);
        returns (when, the run's event_count, the events its log holds)."""
        deadline = CLOCK() + within
        if self._records is None:
            self._records = RunRecords(self.server)
        db = self._records
        while True:
            row = db.run(run_id)
            if row is not None and row[1] != "running":
                when = CLOCK()
                if row[1] != "succeeded":
                    raise RuntimeError(f"{self.name}: run {run_id} was recorded as {row[1]}")
                return when, row[2], db.event_rows(row[0])
            if CLOCK() > deadline:
                raise RuntimeError(f"{self.name}: run {run_id} was not recorded within {within}s")
            self.server.check_alive()
            await asyncio.sleep(0.002)


class RunRecords:
    """Reads a Threadline server's runs from its database (SQLite read-only, or PostgreSQL)."""

    def __init__(self, server: ServerProc) -> None:
        self.db: Any
        if server.db_url:
            import psycopg

            self.db = psycopg.connect(server.db_url, autocommit=True)
            self.mark = "%s"
        else:
            assert server.db_path is not None
            # Read-only, so the bench never takes a write lock the server could wait on.
            self.db = sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True, timeout=5)
            self.mark = "?"

    def run(self, run_id: str) -> tuple[Any, str, int] | None:
        sql = f"SELECT id, status, event_count FROM threads_run WHERE agui_run_id = {self.mark}"
        row = self.db.execute(sql, (run_id,)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def event_rows(self, run_pk: Any) -> int:
        """The events the run's log holds (its frames hold first_seq..last_seq each)."""
        sql = f"SELECT coalesce(sum(last_seq - first_seq + 1), 0) FROM threads_eventframe WHERE run_id = {self.mark}"
        return int(self.db.execute(sql, (run_pk,)).fetchone()[0])

    def close(self) -> None:
        self.db.close()


def _timeline(responses: list[Response], started: float) -> str:
    """When the streams' first text and their last bytes came, after the first request was sent:
    min / p10 / p50 / p90 / max, in seconds. Text that starts late and in a spread points at the
    work before a run's first token (the database thread, bench/stream.py --concurrent on
    PostgreSQL); a spread of last bytes, at the streaming itself."""

    def spread(times: list[float]) -> str:
        times = sorted(t - started for t in times)
        return " / ".join(f"{times[round(q * (len(times) - 1))]:.2f}" for q in (0, 0.1, 0.5, 0.9, 1))

    texts = [r.t_first_text for r in responses if r.t_first_text is not None]
    ends = [r.t_end for r in responses if r.t_end is not None]
    return f"first text {spread(texts) if texts else '-'} s; last byte {spread(ends) if ends else '-'} s"
