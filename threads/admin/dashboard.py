"""The operator's dashboard in the admin (issue #48 item 3): what the assistant costs and where it
fails, over the last day, week or month. Staff only (``admin_view``); each chart is drawn on the
server (threads/admin/charts.py) with a table of its figures under it. The figures are
threads/dashboard.py's; this module only lays them out."""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.safestring import SafeString

from agents.admin_mcp import ServerView, entry_view, server_view
from agents.mcp.config import McpConfigError, file_servers
from agents.mcp.pool import server_statuses
from agents.models import McpServerEntry
from threads.admin.charts import Bar, bar_chart, column_chart
from threads.dashboard import DEFAULT_PERIOD, PERIODS, Dashboard, Percentiles, dashboard_figures


@dataclass(slots=True, frozen=True)
class Section:
    name: str  # the chart's data-chart, and the section's id
    title: str
    chart: SafeString
    headers: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    note: str = ""


def usd(value: float) -> str:
    return f"${value:,.2f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.2f} s"
    return f"{value / 60:.1f} min"


def _runs(board: Dashboard) -> Section:
    rows = [(outcome, f"{runs:,}") for outcome, runs in board.runs_by_outcome]
    bars = [Bar(outcome, runs, f"{runs:,}") for outcome, runs in board.runs_by_outcome]
    return Section(
        "runs-by-outcome",
        "Runs by outcome",
        bar_chart("runs-by-outcome", "Runs by outcome", bars),
        ("outcome", "runs"),
        [*rows, ("all", f"{board.runs:,}")],
    )


def _latency(board: Dashboard) -> Section:
    measures: list[tuple[str, Percentiles]] = [("time to first token", board.first_token), ("run", board.duration)]
    bars = [
        Bar(f"{label} {name}", value, seconds(value))
        for label, figures in measures
        for name, value in (("p50", figures.p50), ("p95", figures.p95))
        if value is not None
    ]
    rows = [(label, f"{figures.count:,}", seconds(figures.p50), seconds(figures.p95)) for label, figures in measures]
    return Section(
        "latency",
        "Time to first token and run duration",
        bar_chart("latency", "Time to first token and run duration (p50, p95)", bars),
        ("measure", "runs", "p50", "p95"),
        rows,
        note="Counted in buckets 10% wide: a percentile is the bucket's upper bound, never under the "
        "true figure. A run that waits for an answer is counted until it waits; it goes on as a run of its own.",
    )


def _spend_by_day(board: Dashboard) -> Section:
    bars = [Bar(day.strftime("%m-%d"), cost, usd(cost)) for day, cost in board.spend_by_day]
    rows = [(day.isoformat(), usd(cost)) for day, cost in board.spend_by_day]
    return Section(
        "spend-by-day",
        "Spend by day",
        column_chart("spend-by-day", "Spend by UTC day", bars),
        ("day (UTC)", "spend"),
        [*rows, ("all", usd(board.spend))],
    )


def _spend_by(name: str, title: str, header: str, figures: list[tuple[str, float]]) -> Section:
    bars = [Bar(label, cost, usd(cost)) for label, cost in figures]
    return Section(
        name, title, bar_chart(name, title, bars), (header, "spend"), [(label, usd(cost)) for label, cost in figures]
    )


def _tokens(board: Dashboard) -> Section:
    bars = [Bar(kind, count, f"{count:,}") for kind, count in board.tokens]
    return Section(
        "tokens",
        "Tokens",
        bar_chart("tokens", "Input, cached and output tokens", bars),
        ("kind", "tokens"),
        [(kind, f"{count:,}") for kind, count in board.tokens],
    )


def _tools(board: Dashboard) -> Section:
    bars = [Bar(t.tool, t.calls, f"{t.calls:,} ({t.failures:,} failed)", alert=t.failures) for t in board.tools]
    rows = [
        (t.tool, f"{t.calls:,}", f"{t.failures:,}", f"{100 * t.failures / t.calls:.0f}%" if t.calls else "—")
        for t in board.tools
    ]
    return Section(
        "tools",
        "Tool calls and failures",
        bar_chart("tools", "Tool calls by tool, failures in red", bars),
        ("tool", "calls", "failures", "failed"),
        rows,
    )


def _approvals(board: Dashboard, now: dt.datetime) -> Section:
    figures = board.approvals
    assert figures is not None
    bars = [Bar("waiting now", figures.waiting, f"{figures.waiting:,}")]
    bars += [Bar(decision, n, f"{n:,}") for decision, n in figures.by_decision]
    oldest = figures.oldest_waiting_since
    wait = figures.answered_wait
    rows: list[tuple[Any, ...]] = [
        ("waiting now", f"{figures.waiting:,}"),
        ("longest waiting now", seconds((now - oldest).total_seconds()) if oldest else "—"),
        *((f"closed: {decision.lower()}", f"{n:,}") for decision, n in figures.by_decision),
        ("answered: how long they waited, p50", seconds(wait.p50)),
        ("answered: how long they waited, p95", seconds(wait.p95)),
    ]
    return Section(
        "approvals",
        "Approvals",
        bar_chart("approvals", "Approvals waiting now, and closed by decision", bars),
        ("figure", "value"),
        rows,
    )


def mcp_views() -> list[ServerView]:
    statuses = server_statuses()
    views = [entry_view(entry, statuses) for entry in McpServerEntry.objects.order_by("name")]
    with contextlib.suppress(McpConfigError):  # the MCP servers' own page names the problem
        views += [server_view(config, statuses) for config in file_servers()]
    return views


def mcp_standing(view: ServerView) -> str:
    """up, down, not started (it starts with the next run that needs it) or disabled."""
    if not view.enabled:
        return "disabled"
    if view.state == "up":
        return "up"
    return "not started" if view.state.startswith("not started") else "down"


def _mcp() -> Section:
    views = mcp_views()
    standings = [mcp_standing(view) for view in views]
    counts = [(label, standings.count(label)) for label in ("up", "down", "not started", "disabled")]
    bars = [Bar(label, n, f"{n:,}", alert=n if label == "down" else 0) for label, n in counts if n]
    rows = [
        (view.name, view.transport, standing, view.state, view.restarts, len(view.tools))
        for view, standing in zip(views, standings, strict=True)
    ]
    return Section(
        "mcp-servers",
        "MCP servers",
        bar_chart("mcp-servers", "MCP servers up or down", bars),
        ("server", "type", "standing", "state in this process", "restarts", "tools"),
        rows,
        note="As this server process sees them now (another process may see them otherwise).",
    )


def dashboard_view(request: HttpRequest) -> HttpResponse:
    period = request.GET.get("period", DEFAULT_PERIOD)
    if period not in PERIODS:
        return HttpResponseBadRequest(f"period must be one of: {', '.join(PERIODS)}", content_type="text/plain")
    now = timezone.now()
    board = dashboard_figures(period=period, now=now)
    sections = [
        _runs(board),
        _spend_by_day(board),
        _spend_by("spend-by-agent", "Spend by agent", "agent", board.spend_by_agent),
        _spend_by("spend-by-user", "Spend by user", "user", board.spend_by_user),
        _tokens(board),
        _latency(board),
        _tools(board),
        _approvals(board, now),
        _mcp(),
    ]
    context = {
        **admin.site.each_context(request),
        "title": "Dashboard",
        "board": board,
        "periods": [(key, label) for key, (label, _) in PERIODS.items()],
        "sections": sections,
    }
    return TemplateResponse(request, "admin/dashboard.html", context)
