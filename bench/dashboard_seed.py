"""A month of history for bench/dashboard.py, bulk-inserted into the database the environment names
(run with the server's environment): ``--runs`` runs over the last 30 UTC days, on threads of 200
users and three agents, with the rows runs leave behind as they end: the dashboard's tallies (as
threads/services/tallies.py would have added them), each day's spend per user and agent, and an
approval for one run in ten. Prints the operator's admin session key as JSON on its last line.

    python bench/dashboard_seed.py --runs 1000000
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from agents.models import Agent, DailySpend  # noqa: E402
from threads.fastsql import insertable  # noqa: E402
from threads.models import Approval, Run, RunTally, Thread, ToolTally  # noqa: E402
from threads.services.tallies import bucket_of  # noqa: E402

USERS, THREADS, DAYS = 200, 20_000, 30
TOOLS = ("glob", "grep", "file_read", "file_write", "file_edit", "apply_patch", "bash", "todo_write", "web_fetch")
STATUSES = (
    ("succeeded", "success", 85),
    ("failed", "error", 8),
    ("cancelled", "cancelled", 4),
    ("waiting", "waiting", 3),
)


def _insert(model: type, rows: list[dict[str, object]]) -> None:
    """Bulk-inserts ``rows`` (database values by field name); a field a row does not name takes its
    default, so a field the model gains later needs nothing here."""
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in insertable(model)]
    defaults = {f.name: f.get_db_prep_save(f.get_default(), connection) for f in fields}
    columns = ", ".join(quote(f.column) for f in fields)
    sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    with connection.cursor() as cursor:
        cursor.executemany(sql, [tuple(row.get(f.name, defaults[f.name]) for f in fields) for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = random.Random(48)
    started = time.monotonic()
    now = dt.datetime.now(dt.UTC)
    agents = [
        Agent.objects.get_or_create(name=name, defaults={"model": "claude-test"})[0]
        for name in ("coder", "reviewer", "planner")
    ]
    users = User.objects.bulk_create([User(username=f"user-{n}") for n in range(USERS)])
    users = list(User.objects.filter(username__startswith="user-"))
    threads = [
        Thread(agui_thread_id=f"t-{n}", agent=agents[n % 3], owner=users[n % USERS], title=f"thread {n}")
        for n in range(THREADS)
    ]
    Thread.objects.bulk_create(threads, batch_size=5000)
    native_uuid = connection.features.has_native_uuid_field
    when = connection.ops.adapt_datetimefield_value
    empty = Run._meta.get_field("client_answers").get_db_prep_save({}, connection)
    arguments = Approval._meta.get_field("arguments").get_db_prep_save({}, connection)
    weights = [weight for *_, weight in STATUSES]
    runs: Counter[tuple[object, ...]] = Counter()
    tools: defaultdict[tuple[dt.date, str], list[int]] = defaultdict(lambda: [0, 0])
    spend: defaultdict[tuple[dt.date, int, int], list[float]] = defaultdict(lambda: [0.0, 0, 0, 0, 0, 0])
    batch: list[dict[str, object]] = []
    approvals: list[dict[str, object]] = []
    with transaction.atomic():
        for n in range(args.runs):
            thread = threads[rng.randrange(THREADS)]
            begun = now - dt.timedelta(seconds=rng.uniform(0, DAYS * 86400 - 3600))
            took = rng.lognormvariate(2.5, 1.0)
            ended = begun + dt.timedelta(seconds=took)
            status, outcome, _ = rng.choices(STATUSES, weights)[0]
            pk = uuid.uuid4()
            tokens = (
                rng.randrange(500, 5000),
                rng.randrange(100, 2000),
                rng.randrange(0, 50_000),
                rng.randrange(0, 5000),
            )
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens = tokens
            batch.append(
                {
                    "id": pk if native_uuid else pk.hex,
                    "agui_run_id": f"r-{n}",
                    "thread": thread.pk if native_uuid else thread.pk.hex,
                    "status": status,
                    "outcome": outcome,
                    "protocol_version": "0.0.59",
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "cache_read_tokens": cache_read_tokens,
                    "cache_write_tokens": cache_write_tokens,
                    "event_count": 12,
                    "client_answers": empty,
                    "started_at": when(begun),
                    "finished_at": when(ended),
                }
            )
            day = ended.date()
            runs[(day, thread.agent_id, outcome, "duration", bucket_of(took))] += 1
            if outcome != "error":
                runs[(day, thread.agent_id, outcome, "first_token", bucket_of(rng.lognormvariate(0, 0.5)))] += 1
            for _ in range(rng.randrange(0, 6)):
                tool = tools[(day, rng.choice(TOOLS))]
                tool[0] += 1
                tool[1] += rng.random() < 0.05
            row = spend[(day, thread.owner_id, thread.agent_id)]
            for i, value in enumerate((tokens[0] * 3e-6 + tokens[1] * 15e-6 + tokens[2] * 0.3e-6, 1, *tokens)):
                row[i] += value
            if n % 10 == 0:
                decision = rng.choice(("approved", "approved", "denied", "timeout", "pending"))
                answered = None if decision == "pending" else when(begun + dt.timedelta(seconds=rng.uniform(2, 600)))
                approvals.append(
                    {
                        "id": f"a-{n}",
                        "run": pk if native_uuid else pk.hex,
                        "tool_call_id": f"call-{n}",
                        "tool": "bash",
                        "arguments": arguments,
                        "message": "run it?",
                        "decision": decision,
                        "requested_at": when(begun),
                        "expires_at": when(begun + dt.timedelta(minutes=30)),
                        "answered_at": answered,
                    }
                )
            if len(batch) == 10_000:
                _insert(Run, batch)
                _insert(Approval, approvals)
                batch, approvals = [], []
        _insert(Run, batch)
        _insert(Approval, approvals)
        RunTally.objects.bulk_create(
            [
                RunTally(day=k[0], agent_id=k[1], outcome=k[2], measure=k[3], bucket=k[4], runs=v)
                for k, v in runs.items()
            ],
            batch_size=5000,
        )
        ToolTally.objects.bulk_create(
            [ToolTally(day=day, tool=tool, calls=c, failures=f) for (day, tool), (c, f) in tools.items()],
            batch_size=5000,
        )
        DailySpend.objects.bulk_create(
            [
                DailySpend(
                    day=day,
                    user_id=user,
                    agent_id=agent,
                    cost_usd=v[0],
                    calls=int(v[1]),
                    input_tokens=int(v[2]),
                    output_tokens=int(v[3]),
                    cache_read_tokens=int(v[4]),
                    cache_write_tokens=int(v[5]),
                )
                for (day, user, agent), v in spend.items()
            ],
            batch_size=5000,
        )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    User.objects.create_superuser("bench-operator", "ops@example.com", "bench-operator-pw")
    client = Client()
    assert client.login(username="bench-operator", password="bench-operator-pw")
    print(
        f"seeded {args.runs:,} runs, {len(runs):,} run tallies, {len(tools):,} tool tallies, {len(spend):,} spend rows "
        f"in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    print(json.dumps({"session": client.cookies["sessionid"].value}))


if __name__ == "__main__":
    main()
