"""The operator's dashboard's page time with a million runs (issue #48 item 3), beside the admin's
thread list page in the same run, on SQLite and (with --database-url) PostgreSQL.

bench/dashboard_seed.py bulk-inserts a month of history (``--runs`` runs on 20,000 threads, with
the tallies, spend and approvals they leave); one ``manage.py serve`` process then answers, one
request at a time over a keep-alive connection, ``--requests`` times each:

  dashboard-day, -week, -month   /admin/dashboard/?period=...
  thread-list                    /admin/threads/thread/ (the admin's first page of threads)

logged in as a superuser (a session cookie). Printed: p50 and p99 in milliseconds, and each
page's p50 as a ratio of the thread list's.

    .venv/bin/python bench/dashboard.py [--runs 1000000] [--requests 30]
        [--database-url postgresql://127.0.0.1:5432/test] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from httpclient import CLOCK, Client
from processes import PYTHON, REPO, Lab, ServeProc

PAGES = {
    "dashboard-day": "/admin/dashboard/?period=day",
    "dashboard-week": "/admin/dashboard/?period=week",
    "dashboard-month": "/admin/dashboard/?period=month",
    "thread-list": "/admin/threads/thread/",
}


async def _measure(port: int, session: str, requests: int) -> dict[str, list[float]]:
    client = Client(port)
    headers = {"Cookie": f"sessionid={session}", "Accept": "text/html"}
    results: dict[str, list[float]] = {page: [] for page in PAGES}
    try:
        # Interleaved, so a change in the machine's load falls on every page alike.
        for _ in range(requests):
            for page, path in PAGES.items():
                start = CLOCK()
                response = await client.request("GET", path, b"", headers, within=120)
                if response.status != 200:
                    raise RuntimeError(f"GET {path}: {response.status} {response.body[:300]!r}")
                results[page].append((CLOCK() - start) * 1000)
        return results
    finally:
        client.close()


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98] if len(values) > 1 else values[0]


def _bench(lab: Lab, label: str, runs: int, requests: int, database_url: str) -> dict[str, list[float]]:
    data_dir = lab.data_dir(label)
    env = lab.threadline_env(data_dir)
    if database_url:
        env["DATABASE_URL"] = lab.postgres_database(label)
    seeded = subprocess.run(
        [PYTHON, "bench/dashboard_seed.py", "--runs", str(runs)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if seeded.returncode != 0:
        raise RuntimeError(f"could not seed the history:\n{seeded.stdout}\n{seeded.stderr}")
    print(f"{label}: {seeded.stderr.strip().splitlines()[-1]}")
    session = json.loads(seeded.stdout.strip().splitlines()[-1])["session"]
    server = ServeProc("serve", env, lab.tmp / f"serve-{label}.log")
    lab.servers.append(server)
    asyncio.run(server.wait_answering("/admin/login/", {"Accept": "text/html"}))
    try:
        return asyncio.run(_measure(server.port, session, requests))
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=30, help="requests per page")
    parser.add_argument("--database-url", default="", help="also on PostgreSQL (a database is made there)")
    parser.add_argument("--only-postgres", action="store_true", help="skip SQLite")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    databases = ([] if args.only_postgres else [("sqlite", "")]) + (
        [("postgres", args.database_url)] if args.database_url else []
    )
    for label, url in databases:
        lab = Lab("serve", "uvloop", keep=args.keep, database_url=url)
        try:
            results = _bench(lab, label, args.runs, args.requests, url)
        finally:
            lab.close()
        base = statistics.median(results["thread-list"])
        print(f"{label}, {args.runs:,} runs: {'page':16} {'p50 ms':>8} {'p99 ms':>8} {'× thread list':>14}")
        for page, times in results.items():
            p50, p99 = statistics.median(times), _p99(times)
            figures[f"{label}/{page}"] = {
                "p50_ms": round(p50, 2),
                "p99_ms": round(p99, 2),
                "ratio": round(p50 / base, 2),
            }
            print(f"{'':{len(label) + len(f'{args.runs:,}') + 8}}{page:16} {p50:8.2f} {p99:8.2f} {p50 / base:14.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
