"""The operator's dashboard's figures (issue #48 item 3), over the last day, week or month of UTC days.

Each figure is read from rows kept per day as runs end and approvals close (``RunTally``,
``ToolTally``, ``ApprovalTally``, ``DailySpend``), through an index that starts with the day, so
its cost follows the days and agents, users and tools shown, not the runs (bench/dashboard.py
measures it with a million runs). Only the approvals waiting now are read from their own rows.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Count, Min, Sum

from agents.models import DailySpend
from threads.models import Approval, ApprovalTally, RunTally, ToolTally
from threads.services.tallies import bucket_bound

PERIODS = {"day": ("Today (UTC)", 1), "week": ("Last 7 days", 7), "month": ("Last 30 days", 30)}
DEFAULT_PERIOD = "week"
SHARED_TOKEN = "shared token"
# The decisions whose wait is a person's (or the deadline's): not a cancel or a new message.
ANSWERED = (Approval.Decision.APPROVED, Approval.Decision.DENIED, Approval.Decision.TIMEOUT)


@dataclass(slots=True, frozen=True)
class Percentiles:
    count: int
    p50: float | None  # seconds; None when nothing was counted
    p95: float | None


@dataclass(slots=True, frozen=True)
class ToolFigures:
    tool: str
    calls: int
    failures: int


@dataclass(slots=True, frozen=True)
class ApprovalFigures:
    waiting: int  # asked, not answered yet (whenever asked)
    oldest_waiting_since: dt.datetime | None
    by_decision: list[tuple[str, int]]  # closed in the period
    answered_wait: Percentiles  # approved, denied or timed out in the period: how long each waited


@dataclass(slots=True)
class Dashboard:
    period: str
    label: str
    first_day: dt.date
    last_day: dt.date
    runs_by_outcome: list[tuple[str, int]] = field(default_factory=list)
    duration: Percentiles = Percentiles(0, None, None)
    first_token: Percentiles = Percentiles(0, None, None)
    spend_by_day: list[tuple[dt.date, float]] = field(default_factory=list)
    spend_by_agent: list[tuple[str, float]] = field(default_factory=list)
    spend_by_user: list[tuple[str, float]] = field(default_factory=list)
    tokens: list[tuple[str, int]] = field(default_factory=list)
    tools: list[ToolFigures] = field(default_factory=list)
    approvals: ApprovalFigures | None = None

    @property
    def runs(self) -> int:
        return sum(count for _, count in self.runs_by_outcome)

    @property
    def spend(self) -> float:
        return sum(cost for _, cost in self.spend_by_day)


def percentiles(counts: Iterable[tuple[int, int]]) -> Percentiles:
    """p50 and p95 of durations counted as (bucket, count): the bound of the bucket each falls in."""
    ordered = sorted(counts)
    total = sum(count for _, count in ordered)
    if not total:
        return Percentiles(0, None, None)
    wanted = {"p50": math.ceil(total * 0.50), "p95": math.ceil(total * 0.95)}
    found: dict[str, float] = {}
    seen = 0
    for bucket, count in ordered:
        seen += count
        for name, rank in wanted.items():
            if name not in found and seen >= rank:
                found[name] = bucket_bound(bucket)
    return Percentiles(total, found["p50"], found["p95"])


def period_days(period: str, now: dt.datetime) -> tuple[dt.date, dt.date]:
    """The first and last UTC day of ``period`` (a key of PERIODS) ending on ``now``'s day."""
    last = now.astimezone(dt.UTC).date()
    return last - dt.timedelta(days=PERIODS[period][1] - 1), last


def _runs(board: Dashboard) -> None:
    # One pass over the period's rows, for the outcomes and both percentiles.
    rows = (
        RunTally.objects.filter(day__gte=board.first_day, day__lte=board.last_day)
        .values_list("outcome", "measure", "bucket")
        .annotate(runs=Sum("runs"))
        .order_by()
    )
    by_outcome: Counter[str] = Counter()
    by_measure: dict[str, Counter[int]] = {
        RunTally.Measure.DURATION: Counter(),
        RunTally.Measure.FIRST_TOKEN: Counter(),
    }
    for outcome, measure, bucket, runs in rows:
        by_measure[measure][bucket] += int(runs)
        if measure == RunTally.Measure.DURATION:  # every run has one
            by_outcome[outcome] += int(runs)
    board.runs_by_outcome = sorted(by_outcome.items(), key=lambda item: (-item[1], item[0]))
    board.duration = percentiles(by_measure[RunTally.Measure.DURATION].items())
    board.first_token = percentiles(by_measure[RunTally.Measure.FIRST_TOKEN].items())


def _spend(board: Dashboard) -> None:
    rows = DailySpend.objects.filter(day__gte=board.first_day, day__lte=board.last_day)
    # The days and the tokens in one pass; the agents and users in one each.
    by_day = {
        day: (float(cost), (int(i), int(cr), int(cw), int(o)))
        for day, cost, i, cr, cw, o in rows.values_list("day")
        .annotate(
            cost=Sum("cost_usd"),
            input=Sum("input_tokens"),
            cache_read=Sum("cache_read_tokens"),
            cache_write=Sum("cache_write_tokens"),
            output=Sum("output_tokens"),
        )
        .order_by()
    }
    days = (board.last_day - board.first_day).days + 1
    board.spend_by_day = [
        (day, by_day[day][0] if day in by_day else 0.0)
        for day in (board.first_day + dt.timedelta(days=n) for n in range(days))
    ]
    tokens = [sum(figures[1][n] for figures in by_day.values()) for n in range(4)]
    board.tokens = list(zip(("input (uncached)", "cache read", "cache write", "output"), tokens, strict=True))
    by_agent = rows.values_list("agent__name").annotate(cost=Sum("cost_usd")).order_by("-cost", "agent__name")
    board.spend_by_agent = [(name, float(cost)) for name, cost in by_agent]
    by_user = rows.values_list("user__username").annotate(cost=Sum("cost_usd")).order_by("-cost", "user__username")
    board.spend_by_user = [(name or SHARED_TOKEN, float(cost)) for name, cost in by_user]


def _tools(board: Dashboard) -> None:
    rows = (
        ToolTally.objects.filter(day__gte=board.first_day, day__lte=board.last_day)
        .values_list("tool")
        .annotate(calls=Sum("calls"), failures=Sum("failures"))
        .order_by("-calls", "tool")
    )
    board.tools = [ToolFigures(tool, int(calls), int(failures)) for tool, calls, failures in rows]


def _approvals(board: Dashboard) -> None:
    # Few approvals wait at any time: these two read the rows of the decision's index.
    pending = Approval.objects.filter(decision=Approval.Decision.PENDING).aggregate(
        waiting=Count("pk"), oldest=Min("requested_at")
    )
    rows = (
        ApprovalTally.objects.filter(day__gte=board.first_day, day__lte=board.last_day)
        .values_list("decision", "bucket")
        .annotate(n=Sum("approvals"))
        .order_by()
    )
    by_decision: Counter[str] = Counter()
    waits: list[tuple[int, int]] = []
    for decision, bucket, n in rows:
        by_decision[decision] += int(n)
        if decision in ANSWERED:
            waits.append((bucket, int(n)))
    ordered = sorted(by_decision.items(), key=lambda item: (-item[1], item[0]))
    board.approvals = ApprovalFigures(
        waiting=pending["waiting"],
        oldest_waiting_since=pending["oldest"],
        by_decision=[(str(Approval.Decision(decision).label), n) for decision, n in ordered],
        answered_wait=percentiles(waits),
    )


def dashboard_figures(*, period: str, now: dt.datetime) -> Dashboard:
    """The dashboard over ``period`` (a key of PERIODS) ending on ``now``'s UTC day."""
    first, last = period_days(period, now)
    board = Dashboard(period=period, label=PERIODS[period][0], first_day=first, last_day=last)
    _runs(board)
    _spend(board)
    _tools(board)
    _approvals(board)
    return board
