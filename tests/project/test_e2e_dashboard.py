"""The operator's dashboard in a real headless browser (tests/clients/admin_dashboard.mjs): each
period picked from its selector shows every chart, drawn, with the seeded history's figures, and
its table under it."""

from __future__ import annotations

import json

from django.contrib.auth.models import User

from tests.admin_browser import drive
from tests.dashboard_history import MCP, check_approvals, check_latency, expected, seed_history

PASSWORD = "a-long-operator-password"
PERIODS = {"Today (UTC)": "day", "Last 7 days": "week", "Last 30 days": "month"}


def test_each_chart_shows_the_seeded_figures_for_each_period(browser, server, coder, tmp_path):
    today = seed_history(coder)
    User.objects.create_user("ops", password=PASSWORD, is_staff=True)
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    seen = drive(
        "admin_dashboard.mjs",
        {
            "userDataDir": str(profile),
            "baseUrl": server.url,
            "username": "ops",
            "password": PASSWORD,
            "periods": list(PERIODS),
            "screenshot": str(tmp_path / "dashboard"),
            "timeoutMs": 30_000,
        },
    )
    assert seen["error"] is None, f"failed at: {seen['step']}: {seen['error']}\n{json.dumps(seen, indent=2)}"
    assert seen["consoleErrors"] == []
    for label, period in PERIODS.items():
        shown = seen["periods"][label]
        assert shown["url"].endswith(f"/admin/dashboard/?period={period}")
        sections = shown["sections"]
        assert len(sections) == 9
        for name, section in sections.items():
            # Each chart is drawn: it takes room on the page, and so does each of its bars.
            assert section["width"] > 300 and section["height"] > 20, name
            drawn = [(width, height) for _, figure, width, height in section["bars"] if figure not in ("0", "$0.00")]
            assert drawn and all(width > 0 and height > 0 for width, height in drawn), name
        for name, rows in expected(today)[period].items():
            assert [tuple(row) for row in sections[name]["rows"]] == rows, (period, name)
            figures = [figure.split(" (")[0] for _, figure, _, _ in sections[name]["bars"]]
            assert figures == [row[1] for row in rows if row[0] != "all"], (period, name)
        assert check_latency(period, sections["latency"]["rows"]) == []
        assert [bar[0] for bar in sections["latency"]["bars"]] == [
            "time to first token p50",
            "time to first token p95",
            "run p50",
            "run p95",
        ]
        assert check_approvals(period, sections["approvals"]["rows"]) == []
        assert sections["approvals"]["bars"][0][:2] == ["waiting now", "1"]
        assert {row[0]: row[2] for row in sections["mcp-servers"]["rows"]} == MCP
        assert [bar[:2] for bar in sections["mcp-servers"]["bars"]] == [["not started", "1"], ["disabled", "1"]]
    # The longer a bar, the larger its figure: the month's tools, 6 calls against 3.
    tools = {label: width for label, _, width, _ in seen["periods"]["Last 30 days"]["sections"]["tools"]["bars"]}
    assert tools["bash"] == 2 * tools["glob"]
