"""The thread list's latency (issue #44): CopilotKit's ``GET /copilotkit/threads`` beside
``GET /api/threads/``, in the same run, on a database of 110,000 threads of one agent: 10,000 of
one user (``heavy``) and 100 of each of 1,000 others (one of them, ``light``, is measured).

One ``manage.py serve`` process (SQLite, as ``make run`` has it) answers, one request at a time
over a keep-alive connection, ``--requests`` times each:

  copilotkit         the first page (limit 50, agentId), as useThreads asks for it
  copilotkit-next    the page after it (its cursor)
  api                /api/threads/?agent=coder, the REST API's first page (50)

each with the user's own API token. Printed: p50 and p99 in milliseconds for each user and route.

    .venv/bin/python bench/thread_list.py [--requests 200] [--json out.json] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from httpclient import CLOCK, Client
from processes import PYTHON, REPO, Lab, ServeProc

ROUTES = ("copilotkit", "copilotkit-next", "api")
HEAVY_THREADS = 10_000
LIGHT_USERS, LIGHT_THREADS = 1_000, 100

# Made in the server's database before it starts; prints the two measured users' API tokens.
_SEED = f"""
import json, uuid
from datetime import timedelta
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.authtoken.models import Token
from agents.models import Agent
from threads.models import Thread

agent = Agent.objects.get(name="coder")
now = timezone.now()
heavy = User.objects.create_user("heavy")
User.objects.bulk_create([User(username=f"light-{{n}}") for n in range({LIGHT_USERS})], batch_size=500)
lights = User.objects.filter(username__startswith="light-")
owners = [(heavy, {HEAVY_THREADS})] + [(user, {LIGHT_THREADS}) for user in lights]
rows = (
    Thread(agui_thread_id=uuid.uuid4().hex, agent=agent, owner=owner, title="a thread",
           updated_at=now - timedelta(seconds=n))
    for owner, count in owners for n in range(count)
)
batch = []
for row in rows:
    batch.append(row)
    if len(batch) == 2000:
        Thread.objects.bulk_create(batch, batch_size=500)
        batch = []
Thread.objects.bulk_create(batch, batch_size=500)
light = User.objects.get(username="light-7")
print(json.dumps({{"heavy": Token.objects.create(user=heavy).key, "light": Token.objects.create(user=light).key}}))
"""


async def _time(client: Client, path: str, token: str, requests: int) -> list[float]:
    # The bench's client asks for an event stream on every request; a JSON list is what is read here.
    headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
    times: list[float] = []
    for _ in range(requests):
        start = CLOCK()
        response = await client.request("GET", path, b"", headers)
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status} {response.body[:200]!r}")
        times.append((CLOCK() - start) * 1000)
    return times


async def _measure(port: int, tokens: dict[str, str], requests: int) -> dict[str, dict[str, list[float]]]:
    client = Client(port)
    try:
        results: dict[str, dict[str, list[float]]] = {}
        for user, token in tokens.items():
            first = await client.request(
                "GET", "/copilotkit/threads?agentId=coder&limit=50", b"", {"Authorization": f"Token {token}"}
            )
            cursor = json.loads(first.body)["nextCursor"]
            paths = {
                "copilotkit": "/copilotkit/threads?agentId=coder&limit=50",
                "copilotkit-next": f"/copilotkit/threads?agentId=coder&limit=50&cursor={cursor}",
                "api": "/api/threads/?agent=coder",
            }
            results[user] = {route: await _time(client, paths[route], token, requests) for route in ROUTES}
        return results
    finally:
        client.close()


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200, help="requests per user and route")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    lab = Lab("serve", "uvloop", keep=args.keep)
    try:
        data_dir = lab.data_dir("thread-list")
        env = lab.threadline_env(data_dir)
        started = time.monotonic()
        seeded = subprocess.run(
            [PYTHON, "manage.py", "shell", "-c", _SEED], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
        )
        if seeded.returncode != 0:
            raise RuntimeError(f"could not seed the threads:\n{seeded.stdout}\n{seeded.stderr}")
        tokens = json.loads(seeded.stdout.strip().splitlines()[-1])
        print(f"seeded {HEAVY_THREADS + LIGHT_USERS * LIGHT_THREADS:,} threads in {time.monotonic() - started:.0f} s")
        server = ServeProc("serve", env, lab.tmp / "serve.log")
        lab.servers.append(server)
        asyncio.run(server.wait_answering("/copilotkit/info", {"Authorization": f"Token {tokens['heavy']}"}))
        results = asyncio.run(_measure(server.port, tokens, args.requests))
    finally:
        lab.close()
    figures: dict[str, Any] = {}
    print(f"{'user':8} {'route':16} {'p50 ms':>8} {'p99 ms':>8}")
    for user, routes in results.items():
        for route, times in routes.items():
            p50, p99 = statistics.median(times), _p(times, 99)
            figures[f"{user}/{route}"] = {"p50_ms": round(p50, 2), "p99_ms": round(p99, 2)}
            print(f"{user:8} {route:16} {p50:8.2f} {p99:8.2f}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
