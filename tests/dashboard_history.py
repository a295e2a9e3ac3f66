"""A history for the dashboard's tests: runs, spend, tool calls and approvals on days before today
(UTC), written as runs write them (the tallies through ``tallies_add``), with what the dashboard
must show for each period worked out by hand below."""

from __future__ import annotations

import datetime as dt
import html
import re
from typing import Any

from django.contrib.auth.models import User

from agents.models import Agent, DailySpend, McpServerEntry
from threads.models import Approval, Run, Thread
from threads.services.tallies import ToolCount, approval_tallies_add, tallies_add


def today_utc() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def midnight(days_ago: int, today: dt.date) -> dt.datetime:
    day = today - dt.timedelta(days=days_ago)
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def _run(
    today: dt.date, agent: Agent, days_ago: int, outcome: str, seconds: float, first: float | None, **tools: ToolCount
) -> None:
    tallies_add(
        agent_id=agent.pk,
        outcome=outcome,
        ended_at=midnight(days_ago, today) + dt.timedelta(minutes=1),
        duration_seconds=seconds,
        first_token_seconds=first,
        tools=tools,
    )


def _spend(
    today: dt.date, days_ago: int, agent: Agent, user: User | None, cost: float, tokens: tuple[int, int, int, int]
) -> None:
    DailySpend.objects.create(
        day=midnight(days_ago, today).date(),
        agent=agent,
        user=user,
        cost_usd=cost,
        calls=1,
        input_tokens=tokens[0],
        cache_read_tokens=tokens[1],
        cache_write_tokens=tokens[2],
        output_tokens=tokens[3],
    )


def _approval(today: dt.date, run: Run, key: str, days_ago: int, decision: str, waited: float | None) -> None:
    asked = midnight(days_ago, today)
    Approval.objects.create(
        id=key, run=run, tool_call_id=f"call-{key}", tool="bash", message="run it?", expires_at=asked, decision=decision
    )
    answered = asked + dt.timedelta(seconds=waited) if waited is not None else None
    Approval.objects.filter(pk=key).update(requested_at=asked, answered_at=answered)
    if answered is not None:  # as threads/waits.py counts one it closes
        approval_tallies_add(closed=[(decision, asked)], now=answered)


def seed_history(coder: Agent) -> dt.date:
    """Seeds the history on the days before today (UTC) and returns that today: what the dashboard
    shows is worked out from it (``expected``), so a test that runs across midnight stays right."""
    today = today_utc()
    reviewer = Agent.objects.create(name="reviewer", model="claude-test")
    alice = User.objects.create_user("alice")
    bob = User.objects.create_user("bob")
    # Today: four runs of 1-4 s with a first token at 0.2 s; one failed after 30 s with none.
    for seconds in (1, 2, 3, 4):
        _run(today, coder, 0, "success", seconds, 0.2)
    _run(today, coder, 0, "error", 30, None, glob=ToolCount(3, 0), bash=ToolCount(2, 1))
    # Three days ago.
    _run(today, reviewer, 3, "success", 10, 1, bash=ToolCount(4, 2))
    _run(today, reviewer, 3, "success", 20, 1)
    _run(today, reviewer, 3, "cancelled", 5, 0.5)
    # Twenty days ago.
    for _ in range(3):
        _run(today, coder, 20, "success", 60, 2, file_read=ToolCount(1, 0))
    _run(today, coder, 20, "success", 60, 2, file_read=ToolCount(2, 0))  # a fourth run
    # Forty days ago: in no period.
    for _ in range(7):
        _run(today, coder, 40, "success", 500, 9, web_fetch=ToolCount(9, 9))

    _spend(today, 0, coder, alice, 1.50, (100, 1000, 200, 50))
    _spend(today, 0, coder, None, 0.25, (10, 0, 0, 5))
    _spend(today, 3, reviewer, bob, 3.00, (300, 3000, 0, 30))
    _spend(today, 20, reviewer, alice, 10.00, (1000, 0, 500, 100))
    _spend(today, 40, coder, bob, 99.00, (9, 9, 9, 9))

    thread = Thread.objects.create(agui_thread_id="t-history", agent=coder)
    run = Run.objects.create(thread=thread, agui_run_id="r-history", status=Run.Status.WAITING)
    _approval(today, run, "a-pending", 0, "pending", None)
    _approval(today, run, "a-today", 0, "approved", 30)
    _approval(today, run, "a-3", 3, "denied", 120)
    _approval(today, run, "a-20", 20, "timeout", 600)
    _approval(today, run, "a-40", 40, "approved", 5000)

    McpServerEntry.objects.create(name="tracker", command="tracker-mcp", enabled=False)
    McpServerEntry.objects.create(name="docs", transport="http", url="http://127.0.0.1:9/mcp")
    return today


def _days(days: int, today: dt.date) -> list[tuple[str, str]]:
    costs = {0: "$1.75", 3: "$3.00", 20: "$10.00"}
    return [(midnight(n, today).date().isoformat(), costs.get(n, "$0.00")) for n in reversed(range(days))]


def expected(today: dt.date) -> dict[str, dict[str, list[tuple[str, ...]]]]:
    """What each chart's table holds for each period, row by row (the percentiles apart: see
    LATENCY), for a history seeded on ``today``."""
    return {
        "day": {
            "runs-by-outcome": [("success", "4"), ("error", "1"), ("all", "5")],
            "spend-by-day": [*_days(1, today), ("all", "$1.75")],
            "spend-by-agent": [("coder", "$1.75")],
            "spend-by-user": [("alice", "$1.50"), ("shared token", "$0.25")],
            "tokens": [("input (uncached)", "110"), ("cache read", "1,000"), ("cache write", "200"), ("output", "55")],
            "tools": [("glob", "3", "0", "0%"), ("bash", "2", "1", "50%")],
        },
        "week": {
            "runs-by-outcome": [("success", "6"), ("cancelled", "1"), ("error", "1"), ("all", "8")],
            "spend-by-day": [*_days(7, today), ("all", "$4.75")],
            "spend-by-agent": [("reviewer", "$3.00"), ("coder", "$1.75")],
            "spend-by-user": [("bob", "$3.00"), ("alice", "$1.50"), ("shared token", "$0.25")],
            "tokens": [("input (uncached)", "410"), ("cache read", "4,000"), ("cache write", "200"), ("output", "85")],
            "tools": [("bash", "6", "3", "50%"), ("glob", "3", "0", "0%")],
        },
        "month": {
            "runs-by-outcome": [("success", "10"), ("cancelled", "1"), ("error", "1"), ("all", "12")],
            "spend-by-day": [*_days(30, today), ("all", "$14.75")],
            "spend-by-agent": [("reviewer", "$13.00"), ("coder", "$1.75")],
            "spend-by-user": [("alice", "$11.50"), ("bob", "$3.00"), ("shared token", "$0.25")],
            "tokens": [
                ("input (uncached)", "1,410"),
                ("cache read", "4,000"),
                ("cache write", "700"),
                ("output", "185"),
            ],
            "tools": [("bash", "6", "3", "50%"), ("file_read", "5", "0", "0%"), ("glob", "3", "0", "0%")],
        },
    }


# The MCP servers by standing, whatever the period: neither has been started in this process.
MCP = {"docs": "not started", "tracker": "disabled"}
# (runs counted, p50, p95) in seconds, by nearest rank, for time to first token and run duration.
LATENCY = {
    "day": {"time to first token": (4, 0.2, 0.2), "run": (5, 3, 30)},
    "week": {"time to first token": (7, 0.2, 1), "run": (8, 4, 30)},
    "month": {"time to first token": (11, 1, 2), "run": (12, 10, 60)},
}
# Approvals: closed in the period by decision; answered waits p50, p95 (seconds). One waits now.
APPROVALS = {
    "day": ({"approved": 1}, 30, 30),
    "week": ({"approved": 1, "denied": 1}, 30, 120),
    "month": ({"approved": 1, "denied": 1, "no answer in time": 1}, 120, 600),
}


def seconds_of(figure: str) -> float:
    """The seconds a figure of the dashboard says ("850 ms", "3.30 s", "1.2 min")."""
    found = re.fullmatch(r"([\d.,]+) (ms|s|min)", figure)
    assert found, figure
    value = float(found[1].replace(",", ""))
    return value * {"ms": 0.001, "s": 1.0, "min": 60.0}[found[2]]


def within_a_bucket(figure: str, true: float) -> bool:
    """The dashboard's percentile is the bound of the 10% bucket the true figure falls in."""
    shown = seconds_of(figure)
    return true * 0.995 <= shown <= true * 1.1 * 1.005


def check_latency(period: str, rows: list[list[str]]) -> list[str]:
    """What is wrong in the latency table's ``rows`` for ``period`` (nothing: [])."""
    wrong = []
    for label, count, p50, p95 in rows:
        want = LATENCY[period][label]
        if int(count) != want[0] or not within_a_bucket(p50, want[1]) or not within_a_bucket(p95, want[2]):
            wrong.append(f"{period} {label}: {count}, {p50}, {p95}; wanted {want}")
    return wrong


def check_approvals(period: str, rows: list[list[str]]) -> list[str]:
    figures: dict[str, Any] = dict((row[0], row[1]) for row in rows)
    decisions, p50, p95 = APPROVALS[period]
    wrong = []
    if figures["waiting now"] != "1":
        wrong.append(f"{period}: waiting now {figures['waiting now']}")
    closed = {key.removeprefix("closed: "): int(value) for key, value in figures.items() if key.startswith("closed: ")}
    if closed != decisions:
        wrong.append(f"{period}: closed {closed}, wanted {decisions}")
    if not within_a_bucket(figures["answered: how long they waited, p50"], p50):
        wrong.append(f"{period}: p50 {figures['answered: how long they waited, p50']}")
    if not within_a_bucket(figures["answered: how long they waited, p95"], p95):
        wrong.append(f"{period}: p95 {figures['answered: how long they waited, p95']}")
    return wrong


SECTION = re.compile(r'<section class="db-section" id="([^"]+)".*?</section>', re.S)
ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
BAR = re.compile(r'<g class="bar" data-label="([^"]*)" data-figure="([^"]*)">')


def read_sections(page: str) -> dict[str, dict[str, list[list[str]]]]:
    """Each section's chart (its bars: label, figure) and table rows, by its name."""
    sections = {}
    for found in SECTION.finditer(page):
        body = found[0]
        tbody = body[body.index("<tbody>") :]
        sections[found[1]] = {
            "bars": [[html.unescape(part) for part in bar] for bar in BAR.findall(body)],
            "rows": [[html.unescape(cell) for cell in CELL.findall(row)] for row in ROW.findall(tbody)],
            "charts": [
                [name]
                for name in re.findall(
                    r'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="([^"]+)"', body
                )
            ],
        }
    return sections
