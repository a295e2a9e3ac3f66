"""The operator's dashboard (/admin/dashboard/): each chart and table shows what the database holds,
for each period; only staff see it; a run that ends through the server is counted."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.models import DailySpend
from tests.dashboard_history import (
    MCP,
    check_approvals,
    check_latency,
    expected,
    read_sections,
    seconds_of,
    seed_history,
)
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.services.tallies import ToolCount, tallies_add


@pytest.fixture
def staff(client, transactional_db):
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


@pytest.mark.parametrize("period", ["day", "week", "month"])
def test_each_chart_and_table_shows_what_the_database_holds(staff, coder, period):
    today = seed_history(coder)
    page = staff.get(f"/admin/dashboard/?period={period}")
    assert page.status_code == 200
    sections = read_sections(page.content.decode())
    assert list(sections) == [
        "runs-by-outcome",
        "spend-by-day",
        "spend-by-agent",
        "spend-by-user",
        "tokens",
        "latency",
        "tools",
        "approvals",
        "mcp-servers",
    ]
    for name, rows in expected(today)[period].items():
        assert [tuple(row) for row in sections[name]["rows"]] == rows, name
        # The chart draws a bar for each row of its table (the total aside), with its figure.
        bars = [(label, figure.split(" (")[0]) for label, figure in sections[name]["bars"]]
        if name == "spend-by-day":
            assert [figure for _, figure in bars] == [row[1] for row in rows[:-1]]
        else:
            assert bars == [row[:2] for row in rows if row[0] != "all"], name
    assert check_latency(period, sections["latency"]["rows"]) == []
    assert len(sections["latency"]["bars"]) == 4
    assert check_approvals(period, sections["approvals"]["rows"]) == []
    assert sections["approvals"]["bars"][0] == ["waiting now", "1"]
    assert all(section["charts"] == [[name]] for name, section in sections.items())


def test_the_mcp_servers_are_shown_with_their_standing(staff, coder):
    seed_history(coder)
    sections = read_sections(staff.get("/admin/dashboard/").content.decode())
    assert {row[0]: row[2] for row in sections["mcp-servers"]["rows"]} == MCP
    assert sections["mcp-servers"]["bars"] == [["not started", "1"], ["disabled", "1"]]


def test_an_empty_history_says_so_in_each_table(staff, coder):
    page = staff.get("/admin/dashboard/?period=day").content.decode()
    sections = read_sections(page)
    assert sections["runs-by-outcome"]["rows"] == [["all", "0"]]
    assert sections["tools"]["rows"] == [["Nothing in this period."]]
    assert "Nothing in this period." in page


def test_a_person_who_is_not_staff_is_refused(client, coder, transactional_db):
    seed_history(coder)
    assert client.get("/admin/dashboard/").status_code == 302  # to the admin's sign-in
    client.force_login(User.objects.create_user("mallory", password="x" * 20))
    refused = client.get("/admin/dashboard/?period=month")
    assert refused.status_code == 302 and refused["Location"].startswith("/admin/login/")
    assert b"alice" not in refused.content and b"$" not in refused.content


def test_an_unknown_period_is_a_400_that_names_the_periods(staff, coder):
    refused = staff.get("/admin/dashboard/?period=year")
    assert refused.status_code == 400
    assert refused.content.decode() == "period must be one of: day, week, month"


def test_the_admin_index_links_to_the_dashboard(staff, coder):
    assert 'href="/admin/dashboard/"' in staff.get("/admin/").content.decode()


def test_a_run_through_the_server_is_counted_with_its_first_token_and_tool_calls(server, staff):
    done = post_run(server.url, "coder", v1(run_input("t-dash", "r-dash", user("what is in this project?"))))
    assert done.events[-1]["type"] == "RUN_FINISHED"
    asked = post_run(server.url, "coder", v1(run_input("t-dash-2", "r-dash-2", user("plan the work"))))
    assert asked.events[-1]["outcome"]["type"] == "interrupt"
    sections = read_sections(staff.get("/admin/dashboard/?period=day").content.decode())
    assert sections["runs-by-outcome"]["rows"] == [["success", "1"], ["waiting", "1"], ["all", "2"]]
    assert [row[:3] for row in sections["tools"]["rows"]] == [["file_read", "1", "0"], ["glob", "1", "0"]]
    latency = {row[0]: row for row in sections["latency"]["rows"]}
    assert latency["time to first token"][1] == "2" and latency["run"][1] == "2"
    assert sections["approvals"]["rows"][0] == ["waiting now", "1"]

    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    answered = post_run(server.url, "coder", {**v1(run_input("t-dash-2", "r-dash-3")), "resume": resume})
    assert answered.events[-1]["type"] == "RUN_FINISHED"
    server.drain()
    sections = read_sections(staff.get("/admin/dashboard/?period=day").content.decode())
    approvals = dict(sections["approvals"]["rows"])
    assert approvals["waiting now"] == "0" and approvals["closed: approved"] == "1"
    assert seconds_of(approvals["answered: how long they waited, p50"]) < 30
    outcomes = dict(sections["runs-by-outcome"]["rows"])
    assert (outcomes["success"], outcomes["waiting"]) == ("2", "1")
    assert ["todo_write", "1", "0", "0%"] in sections["tools"]["rows"]


def test_a_failed_tool_call_and_the_runs_spend_are_counted_through_the_sdk(server, fake_api, staff):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "no-such-file.txt"}, id="toolu_missing"),
            tool_turn("glob", {"pattern": "*"}, id="toolu_glob"),
            text_turn(["Done."]),
        ]
    )
    done = post_run(server.url, "coder", v1(run_input("t-dash-sdk", "r1", user("read the missing file"))))
    assert done.events[-1]["type"] == "RUN_FINISHED"
    sections = read_sections(staff.get("/admin/dashboard/?period=day").content.decode())
    assert [row[:3] for row in sections["tools"]["rows"]] == [["file_read", "1", "1"], ["glob", "1", "0"]]
    assert [bar[0] for bar in sections["tools"]["bars"]] == ["file_read", "glob"]
    # Three model calls' tokens (the fake's usage), spent by the coder agent (less than a cent).
    tokens = {kind: int(count.replace(",", "")) for kind, count in sections["tokens"]["rows"]}
    assert tokens["input (uncached)"] > 0 and tokens["output"] > 0
    assert [row[0] for row in sections["spend-by-agent"]["rows"]] == ["coder"]
    assert [row[:2] for row in sections["latency"]["rows"]] == [["time to first token", "1"], ["run", "1"]]
    assert sections["runs-by-outcome"]["rows"] == [["success", "1"], ["all", "1"]]


def test_names_are_escaped_in_the_charts_and_tables(staff, coder):
    hostile = '<script>alert("x")</script>'
    tallies_add(
        agent_id=coder.pk,
        outcome="success",
        ended_at=timezone.now(),
        duration_seconds=1,
        first_token_seconds=None,
        tools={f"mcp__evil__{hostile}": ToolCount(1, 1)},
    )
    DailySpend.objects.create(
        day=timezone.now().date(), agent=coder, user=User.objects.create_user(hostile), cost_usd=1
    )
    page = staff.get("/admin/dashboard/?period=day").content.decode()
    assert "<script>" not in page
    sections = read_sections(page)
    assert sections["tools"]["bars"] == [[f"mcp__evil__{hostile}", "1 (1 failed)"]]
    assert sections["spend-by-user"]["rows"] == [[hostile, "$1.00"]]
