"""What the event log costs the database, against the bytes its client was sent (issue #27).

    .venv/bin/python bench/log_storage.py                    # SQLite
    DATABASE_URL=postgresql://127.0.0.1:5432/test .venv/bin/python bench/log_storage.py

Two replies on the full stack, each measured as the database's growth while it was streamed and
logged, divided by the bytes of the SSE body its client received (the baseline, measured in the
same run):

  fast    one 20,000-token reply on the anthropic SDK path, streamed as fast as it goes
  paced   20 replies at a model's pace (a token every 25 ms, 40 tokens/s) for 15 s at once,
          on the scripted model: a flush then holds only the few events of its 50 ms

For each: events logged, frames (rows) stored, events per row, and the growth ratio. Then the
row-per-event form the log had before (a row per event with its (run, seq) index) is written with
the same events into a scratch table of the same database, and its growth is printed beside, so the
two forms are compared in one run. Targets: growth <= 0.5x the bytes sent; a 20,000-token reply
in >= 20x fewer rows than events.

Database size: SQLite's used pages (page_count - freelist_count) x page_size, read-only; on
PostgreSQL the total size of the public schema's tables with their indexes and TOAST.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import sys
import uuid
from dataclasses import dataclass
from typing import Any

from httpclient import Client
from measure import Target
from processes import Lab, ServerProc

FAST_TOKENS = 20_000
PACED_STREAMS = 20
PACED_SECONDS = 15.0
PACE_MS = 25
TARGET_GROWTH = 0.5
TARGET_FEWER_ROWS = 20.0
OLD_FORM = (
    "CREATE TABLE bench_rowlog (id {pk}, run_id char(32) NOT NULL, seq integer NOT NULL, "
    "type varchar(40) NOT NULL, payload text NOT NULL, created_at {ts} NOT NULL)",
    "CREATE UNIQUE INDEX bench_rowlog_seq ON bench_rowlog (run_id, seq)",
)


@dataclass
class Figures:
    label: str
    sent: int = 0  # SSE body bytes the clients received
    events: int = 0
    frames: int = 0
    growth: int = 0  # database bytes
    old_growth: int = 0  # the same events as a row each


class Database:
    """The server's database, read for its size (and written only for the old form's scratch table)."""

    def __init__(self, server: ServerProc) -> None:
        self.url = server.db_url
        self.path = server.db_path
        self.db: Any
        if self.url:
            import psycopg

            self.db = psycopg.connect(self.url, autocommit=True)
        else:
            self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)

    def size(self) -> int:
        if self.url:
            sql = (
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
            )
            return int(self.db.execute(sql).fetchone()[0])
        pages, free, page_size = (
            self.db.execute(f"PRAGMA {name}").fetchone()[0] for name in ("page_count", "freelist_count", "page_size")
        )
        return int((pages - free) * page_size)

    def log_of(self, run_ids: list[str]) -> tuple[int, int]:
        """(events, frames) the runs' logs hold."""
        mark = "%s" if self.url else "?"
        marks = ", ".join([mark] * len(run_ids))
        sql = (
            "SELECT coalesce(sum(f.last_seq - f.first_seq + 1), 0), count(*) FROM threads_eventframe f "
            f"JOIN threads_run r ON r.id = f.run_id WHERE r.agui_run_id IN ({marks})"
        )
        events, frames = self.db.execute(sql, run_ids).fetchone()
        return int(events), int(frames)

    def old_form_growth(self, bodies: list[bytes]) -> int:
        """The growth of writing the streamed events as a row each, in the old form's shape."""
        writer: Any
        if self.url:
            import psycopg

            writer = psycopg.connect(self.url, autocommit=True)
            pk, ts, mark = "bigserial PRIMARY KEY", "timestamptz", "%s"
        else:
            writer = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            pk, ts, mark = "integer PRIMARY KEY AUTOINCREMENT", "datetime", "?"
        try:
            for statement in OLD_FORM:
                writer.execute(statement.format(pk=pk, ts=ts))
            before = self.size()
            now = "2026-12-02 00:00:00+00"
            insert = (
                f"INSERT INTO bench_rowlog (run_id, seq, type, payload, created_at) VALUES ({', '.join([mark] * 5)})"
            )
            for body in bodies:
                run = uuid.uuid4().hex
                rows = [(run, seq, type_, payload, now) for seq, type_, payload in _events(body)]
                if self.url:
                    with writer.cursor() as cursor:
                        cursor.executemany(insert, rows)
                else:
                    writer.execute("BEGIN")
                    writer.executemany(insert, rows)
                    writer.execute("COMMIT")
            return self.size() - before
        finally:
            writer.execute("DROP TABLE bench_rowlog")
            writer.close()

    def close(self) -> None:
        self.db.close()


def _events(body: bytes) -> list[tuple[int, str, str]]:
    """(seq, type, payload) of each SSE frame of a body (the bench's servers send one data line each)."""
    import json

    events = []
    seq = 0
    for line in body.split(b"\n"):
        if line.startswith(b"id: "):
            seq = int(line[4:])
        elif line.startswith(b"data: "):
            payload = line[6:].decode()
            events.append((seq, json.loads(payload)["type"], payload))
    return events


async def fast(lab: Lab) -> Figures:
    server = lab.start("sdk", tag="storage")
    target = Target(server)
    await target.wait_ready()
    await target.warm_up(10, 2)
    db = Database(server)
    try:
        before = db.size()
        target.queue_replies(f"bench {FAST_TOKENS}")
        response, _, run_id = await target.request(FAST_TOKENS)
        await target.recorded(run_id)
        figures = Figures("fast: one 20,000-token reply (SDK path)", growth=db.size() - before)
        body = response.body
        figures.sent = len(body)
        figures.events, figures.frames = db.log_of([run_id])
        figures.old_growth = db.old_form_growth([body])
        return figures
    finally:
        target.close()
        db.close()


async def paced(lab: Lab) -> Figures:
    server = lab.start("scripted", tag="storage")
    target = Target(server)
    await target.wait_ready()
    await target.warm_up(10, 2)
    db = Database(server)
    clients = [Client(server.port) for _ in range(PACED_STREAMS)]
    try:
        before = db.size()
        requests = [asyncio.ensure_future(_paced_reply(client)) for client in clients]
        await asyncio.sleep(PACED_SECONDS)
        stopper = Client(server.port)
        try:
            await stopper.request("POST", "/bench/slow/stop", b"", {})
        finally:
            stopper.close()
        done = await asyncio.gather(*requests)
        for _, run_id in done:
            await target.recorded(run_id)
        figures = Figures(
            f"paced: {PACED_STREAMS} replies at 40 tokens/s for {PACED_SECONDS:g} s (scripted)",
            growth=db.size() - before,
        )
        bodies = [body for body, _ in done]
        figures.sent = sum(map(len, bodies))
        figures.events, figures.frames = db.log_of([run_id for _, run_id in done])
        figures.old_growth = db.old_form_growth(bodies)
        return figures
    finally:
        for client in clients:
            client.close()
        target.close()
        db.close()


async def _paced_reply(client: Client) -> tuple[bytes, str]:
    import json

    run_id = f"r-{uuid.uuid4().hex}"
    body = {
        "threadId": f"t-{uuid.uuid4().hex}",
        "runId": run_id,
        "messages": [{"id": f"m-{uuid.uuid4().hex}", "role": "user", "content": f"paced bench-slow={PACE_MS}"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        "protocolVersion": "1.0",
    }
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench-token"}
    response = await client.request(
        "POST", "/agui/coder", json.dumps(body).encode(), headers, within=PACED_SECONDS + 120
    )
    if response.status != 200 or b"RUN_FINISHED" not in response.body[-2000:]:
        raise RuntimeError(f"a paced reply failed: HTTP {response.status}, ends {response.raw[-300:]!r}")
    return response.body, run_id


def report(results: list[Figures], database: str) -> tuple[str, bool]:
    lines = [
        f"Event log storage on {database} (baseline: the bytes each client was sent, same run)",
        f"  {'reply':58} {'sent KiB':>9} {'events':>7} {'rows':>6} {'ev/row':>7} {'grew KiB':>9} "
        f"{'x sent':>7} {'row/event form':>15}",
    ]
    met = True
    for f in results:
        ratio = f.growth / f.sent
        old = f.old_growth / f.sent
        per_row = f.events / max(1, f.frames)
        lines.append(
            f"  {f.label:58} {f.sent / 1024:9,.0f} {f.events:7,} {f.frames:6,} {per_row:7.1f} "
            f"{f.growth / 1024:9,.0f} {ratio:7.2f} {old:14.2f}x"
        )
        ok = ratio <= TARGET_GROWTH
        verdict = f"    growth <= {TARGET_GROWTH}x sent: {'MET' if ok else 'MISSED'}"
        if f.label.startswith("fast"):
            rows_ok = per_row >= TARGET_FEWER_ROWS
            ok &= rows_ok
            verdict += f"; >= {TARGET_FEWER_ROWS:g}x fewer rows than events: {'MET' if rows_ok else 'MISSED'}"
        met &= ok
        lines.append(verdict)
    lines.append("  (row/event form: the same events written as a row each with its (run, seq) index, as before.)")
    return "\n".join(lines), met


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")
    args = parser.parse_args()
    database_url = os.environ.pop("DATABASE_URL", "")
    lab = Lab("uvicorn", "uvloop", keep=False, database_url=database_url)
    try:
        results = [await fast(lab), await paced(lab)]
    finally:
        lab.close()
    text, met = report(results, "PostgreSQL" if database_url else "SQLite")
    print(text, flush=True)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
