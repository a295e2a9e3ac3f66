"""What the dashboard counts of runs, added to as each run ends (issue #48): runs by outcome, how long
they took and took to their first token, and tool calls and failures by tool.

A duration is counted in a bucket, not stored: bucket ``b`` holds the durations over
``FIRST_BOUND * GROWTH**(b-1)`` seconds and up to ``FIRST_BOUND * GROWTH**b`` (bucket 0: up to
``FIRST_BOUND``). A percentile read from the buckets is the upper bound of the bucket it falls in:
never under the true figure, and at most 10% over it. So a month of a million runs is a few thousand
rows (days × agents × outcomes × buckets), whose sums the dashboard reads at once.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Model

from threads import fastsql
from threads.models import ApprovalTally, RunTally, ToolTally

FIRST_BOUND = 0.01  # seconds
GROWTH = 1.1
LAST_BUCKET = 250  # about 22 days: anything longer is counted there


def bucket_of(seconds: float) -> int:
    """The bucket a duration is counted in."""
    if seconds <= FIRST_BOUND:
        return 0
    # The small epsilon keeps a duration equal to a bound in the bucket it closes.
    return min(LAST_BUCKET, math.ceil(math.log(seconds / FIRST_BOUND, GROWTH) - 1e-9))


def bucket_bound(bucket: int) -> float:
    """The longest duration bucket ``bucket`` holds, in seconds."""
    return FIRST_BOUND * GROWTH**bucket


@dataclass(slots=True, frozen=True)
class ToolCount:
    calls: int
    failures: int


def _upsert(
    table: type[Model],
    keys: tuple[str, ...],
    adds: tuple[str, ...],
    rows: list[tuple[object, ...]],
) -> fastsql.Statement:
    """One INSERT of ``rows`` that adds to the rows already there (the same text on SQLite and
    PostgreSQL), so two runs ending at once both count, with no read before the write."""
    quote = connection.ops.quote_name
    name = quote(table._meta.db_table)
    columns = [quote(str(table._meta.get_field(key).column)) for key in (*keys, *adds)]  # type: ignore[union-attr]
    marks = ", ".join(["(" + ", ".join(["%s"] * len(columns)) + ")"] * len(rows))
    conflict = ", ".join(columns[: len(keys)])
    added = ", ".join(f"{col} = {name}.{col} + excluded.{col}" for col in columns[len(keys) :])
    sql = f"INSERT INTO {name} ({', '.join(columns)}) VALUES {marks} ON CONFLICT ({conflict}) DO UPDATE SET {added}"
    return sql, [value for row in rows for value in row]


def tallies_add(
    *,
    agent_id: int,
    outcome: str,
    ended_at: dt.datetime,
    duration_seconds: float,
    first_token_seconds: float | None,
    tools: Mapping[str, ToolCount],
) -> None:
    """Counts one run of ``agent_id`` that ended at ``ended_at`` with ``outcome``: its duration, its
    time to first token (None: it streamed none) and its tool calls, on the UTC day it ended. One
    round trip on PostgreSQL."""
    day = ended_at.astimezone(dt.UTC).date()
    measured = Counter({(RunTally.Measure.DURATION.value, bucket_of(duration_seconds)): 1})
    if first_token_seconds is not None:
        measured[(RunTally.Measure.FIRST_TOKEN.value, bucket_of(first_token_seconds))] += 1
    statements = [
        _upsert(
            RunTally,
            ("day", "agent", "outcome", "measure", "bucket"),
            ("runs",),
            [(day, agent_id, outcome, measure, bucket, runs) for (measure, bucket), runs in measured.items()],
        )
    ]
    if tools:
        statements.append(
            _upsert(
                ToolTally,
                ("day", "tool"),
                ("calls", "failures"),
                [(day, tool, count.calls, count.failures) for tool, count in sorted(tools.items())],
            )
        )
    fastsql.execute(*statements)


def approval_tallies_add(*, closed: list[tuple[str, dt.datetime]], now: dt.datetime) -> None:
    """Counts approvals closed at ``now``, each (decision, when it was asked), with how long it waited."""
    if not closed:
        return
    day = now.astimezone(dt.UTC).date()
    counted = Counter((str(decision), bucket_of((now - asked).total_seconds())) for decision, asked in closed)
    fastsql.execute(
        _upsert(
            ApprovalTally,
            ("day", "decision", "bucket"),
            ("approvals",),
            [(day, decision, bucket, n) for (decision, bucket), n in sorted(counted.items())],
        )
    )


def tally_on_commit(closed: list[tuple[str, dt.datetime]], now: dt.datetime) -> None:
    """``approval_tallies_add`` once the caller's transaction commits (at once outside one): the
    tally's rows are then locked by no transaction that holds a thread's or a run's, whatever order
    approvals are closed in, and a transaction rolled back counts nothing."""
    transaction.on_commit(lambda: approval_tallies_add(closed=closed, now=now), robust=True)
