"""The admin sets spend caps (issue #48): an agent's in its Budget section, a user's own, and shows the
daily spend read-only."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.contrib.auth.models import User

from agents.models import Agent, DailySpend, UserBudget


def test_an_agents_caps_are_edited_on_its_page(operator, coder):
    page = operator.get(f"/admin/agents/agent/{coder.pk}/change/")
    assert page.status_code == 200
    assert b"budget_daily_usd" in page.content and b"budget_monthly_usd" in page.content
    form = {
        key: value
        for key, value in {
            "name": coder.name,
            "description": "",
            "enabled": "on",
            "model": "",
            "max_tokens": coder.max_tokens,
            "thinking_budget": 0,
            "system_prompt": coder.system_prompt,
            "environment_block": "on",
            "grounding_mode": coder.grounding_mode,
            "max_iterations": coder.max_iterations,
            "max_run_seconds": coder.max_run_seconds,
            "token_budget": 0,
            "budget_daily_usd": "2.50",
            "budget_monthly_usd": "",
        }.items()
    }
    saved = operator.post(f"/admin/agents/agent/{coder.pk}/change/", form)
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    coder = Agent.objects.get(pk=coder.pk)
    assert (coder.budget_daily_usd, coder.budget_monthly_usd) == (Decimal("2.50"), None)


def test_a_users_own_caps_are_added_and_a_negative_one_refused(operator):
    olive = User.objects.create_user("olive")
    refused = operator.post("/admin/agents/userbudget/add/", {"user": olive.pk, "daily_usd": "-1", "monthly_usd": ""})
    assert refused.status_code == 200 and not UserBudget.objects.exists()
    added = operator.post("/admin/agents/userbudget/add/", {"user": olive.pk, "daily_usd": "3", "monthly_usd": "40"})
    assert added.status_code == 302
    assert UserBudget.objects.get(user=olive).monthly_usd == Decimal("40")


def test_daily_spend_is_listed_read_only(operator, coder):
    DailySpend.objects.create(day=dt.date(2026, 12, 1), user=None, agent=coder, cost_usd=1.5, calls=3)
    listed = operator.get("/admin/agents/dailyspend/")
    assert listed.status_code == 200 and b"the shared token" in listed.content
    assert operator.get("/admin/agents/dailyspend/add/").status_code == 403
