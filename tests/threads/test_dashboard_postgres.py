"""On PostgreSQL the tallies' upserts add up (rows written twice, approvals counted after their
transaction commits) and the dashboard shows the same figures as on SQLite, for each period."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.dashboard_history import check_approvals, check_latency, expected
from tests.procs import postgres_env, script_report

pytestmark = pytest.mark.services

SCRIPT = """
import json
import django
django.setup()
from django.contrib.auth.models import User
from django.test import Client
from agents.models import Agent
from tests.dashboard_history import read_sections, seed_history

today = seed_history(Agent.objects.get(name="coder"))
client = Client()
client.force_login(User.objects.create_user("ops", is_staff=True))
pages = {}
for period in ("day", "week", "month"):
    page = client.get(f"/admin/dashboard/?period={period}")
    assert page.status_code == 200, page.content[:500]
    pages[period] = {name: section["rows"] for name, section in read_sections(page.content.decode()).items()}
print(json.dumps({"today": today.isoformat(), "pages": pages}))
"""


def test_the_dashboard_shows_the_seeded_history_on_postgresql(postgres_url, tmp_path: Path):
    report = script_report(SCRIPT, postgres_env(postgres_url, tmp_path))
    figures = expected(dt.date.fromisoformat(report["today"]))
    for period, sections in report["pages"].items():
        for name, rows in figures[period].items():
            assert [tuple(row) for row in sections[name]] == rows, (period, name)
        assert check_latency(period, sections["latency"]) == []
        assert check_approvals(period, sections["approvals"]) == []
