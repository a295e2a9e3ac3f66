"""What users and agents spend, and the caps on it (issue #48): where the caps stand (the writes are
threads/services/spending.py's).

Spend is what model calls cost at list prices (orchestrator/pricing.py), every call of a run: its
own, its sub-agents' and its compactions'. It is kept per UTC day, user and agent in ``DailySpend``,
added to when a run settles its spend (at each step and at its end), so a cap's check sums at most
a month of rows for one user and one agent, through an index, however many runs there were.

A run is paid for by its thread's owner; a thread with no owner was started with the shared
``AGUI_TOKEN``, which is one user (``user_id`` None).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q, Sum
from django.db.models.functions import Coalesce

from agents.models import Agent, DailySpend
from orchestrator.budget import BudgetStanding, CapStanding

SHARED_TOKEN = "the shared token"


@dataclass(slots=True, frozen=True)
class Cap:
    name: str  # user_daily, user_monthly, agent_daily, agent_monthly
    label: str
    limit_usd: float
    monthly: bool
    of_user: bool


def next_day(now: dt.datetime) -> dt.datetime:
    day = now.astimezone(dt.UTC).date() + dt.timedelta(days=1)
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)


def next_month(now: dt.datetime) -> dt.datetime:
    today = now.astimezone(dt.UTC).date()
    year, month = (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)
    return dt.datetime(year, month, 1, tzinfo=dt.UTC)


def _limit(override: Decimal | None, default: float | None) -> float | None:
    if override is not None:
        return float(override)
    return default


def budget_caps(*, agent: Agent, user_id: int | None) -> list[Cap]:
    """The caps on a run of ``agent`` paid for by ``user_id``: the admin's overrides, else the settings'.
    One query for a user (their name and their own caps together), none for the shared token."""
    user_daily: Decimal | None = None
    user_monthly: Decimal | None = None
    who = SHARED_TOKEN
    if user_id is not None:
        row = (
            get_user_model()
            .objects.filter(pk=user_id)
            .values_list("username", "budget__daily_usd", "budget__monthly_usd")
            .first()
        )
        name, user_daily, user_monthly = row if row is not None else (f"#{user_id}", None, None)
        who = f"user {name}"
    limits = [
        ("user_daily", f"the daily budget of {who}", user_daily, "BUDGET_USER_DAILY_USD"),
        ("user_monthly", f"the monthly budget of {who}", user_monthly, "BUDGET_USER_MONTHLY_USD"),
        ("agent_daily", f"the daily budget of agent {agent.name}", agent.budget_daily_usd, "BUDGET_AGENT_DAILY_USD"),
        (
            "agent_monthly",
            f"the monthly budget of agent {agent.name}",
            agent.budget_monthly_usd,
            "BUDGET_AGENT_MONTHLY_USD",
        ),
    ]
    caps = []
    for name, label, own, setting in limits:
        limit = _limit(own, getattr(settings, setting))
        if limit is not None:
            caps.append(Cap(name, label, limit, monthly=name.endswith("monthly"), of_user=name.startswith("user")))
    return caps


def spend_standing(*, agent: Agent, user_id: int | None, caps: list[Cap], now: dt.datetime) -> BudgetStanding:
    """Where ``caps`` stand at ``now``: one query summing this month's rows of the user and the agent."""
    if not caps:
        return BudgetStanding()
    today = now.astimezone(dt.UTC).date()
    month_start = today.replace(day=1)
    user = Q(user__isnull=True) if user_id is None else Q(user_id=user_id)
    mine = Q(agent_id=agent.pk)
    wanted = Q()
    if any(cap.of_user for cap in caps):
        wanted |= user
    if any(not cap.of_user for cap in caps):
        wanted |= mine
    zero = 0.0
    sums = DailySpend.objects.filter(wanted, day__gte=month_start).aggregate(
        user_daily=Coalesce(Sum("cost_usd", filter=user & Q(day=today)), zero),
        user_monthly=Coalesce(Sum("cost_usd", filter=user), zero),
        agent_daily=Coalesce(Sum("cost_usd", filter=mine & Q(day=today)), zero),
        agent_monthly=Coalesce(Sum("cost_usd", filter=mine), zero),
    )
    return BudgetStanding(
        tuple(
            CapStanding(
                name=cap.name,
                label=cap.label,
                limit_usd=cap.limit_usd,
                spent_usd=float(sums[cap.name]),
                resets_at=next_month(now) if cap.monthly else next_day(now),
            )
            for cap in caps
        )
    )
