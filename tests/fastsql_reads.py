"""threads/fastsql.py's reads (``first``, ``first_values``) against the ORM's answers on the same
rows: the SQLite test (tests/threads/test_fastsql.py) and the PostgreSQL one run it."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Model

from agents.models import Agent, DailySpend
from threads import fastsql
from threads.models import Thread


def _fields(obj: Model | None) -> list[tuple[str, Any, str]] | None:
    if obj is None:
        return None
    return [
        (f.attname, getattr(obj, f.attname), type(getattr(obj, f.attname)).__name__) for f in obj._meta.concrete_fields
    ]


def _orm_owner(agui_thread_id: str) -> tuple[Any, ...] | None:
    rows = list(Thread.objects.filter(agui_thread_id=agui_thread_id).values_list("owner_id")[:1])
    return rows[0] if rows else None


def fastsql_reads_against_the_orm() -> dict[str, Any]:
    """Rows of the kinds the run's way to its first byte reads (an agent: JSON, decimal, booleans;
    a thread: UUID, datetime, foreign keys; a day's spend: a date, a null user), each read both ways."""
    olive = get_user_model().objects.create(username="olive-fastsql")
    agent = Agent.objects.create(
        name="reader",
        mcp_servers=["files", "web"],
        budget_daily_usd=Decimal("1.25"),
        environment_block=False,
        thinking_budget=2048,
    )
    Agent.objects.create(name="off", enabled=False)
    thread = Thread.objects.create(agui_thread_id="t-read", agent=agent, owner=olive, title="read me")
    Thread.objects.create(agui_thread_id="t-unowned", agent=agent)
    day = dt.date(2026, 12, 7)
    spends = [
        DailySpend.objects.create(day=day, user=None, agent=agent, cost_usd=0.5),
        DailySpend.objects.create(day=day, user=None, agent=agent, cost_usd=0.25),  # two first writes at once
        DailySpend.objects.create(day=day, user=olive, agent=agent, cost_usd=2.0),
    ]
    return {
        "agent": _fields(fastsql.first(Agent, name="reader", enabled=True)) == _fields(Agent.objects.get(pk=agent.pk)),
        "agent_values": _fields(fastsql.first(Agent, name="reader", enabled=True)),
        "disabled": fastsql.first(Agent, name="off", enabled=True),
        "missing": fastsql.first(Agent, name="nobody", enabled=True),
        "thread": _fields(fastsql.first(Thread, agui_thread_id="t-read")) == _fields(Thread.objects.get(pk=thread.pk)),
        "owner": [
            fastsql.first_values(Thread, ("owner",), agui_thread_id=name) == _orm_owner(name)
            for name in ("t-read", "t-unowned", "t-none")
        ],
        "spend": [
            fastsql.first_values(DailySpend, ("id", "cost_usd"), order_by=("id",), day=day, agent=agent.pk, user=None),
            fastsql.first_values(DailySpend, ("id",), order_by=("id",), day=day, agent=agent.pk, user=olive.pk),
            fastsql.first_values(DailySpend, ("id",), day=day + dt.timedelta(days=1), agent=agent.pk, user=None),
        ],
        "spend_expected": [(spends[0].pk, 0.5), (spends[2].pk,), None],
    }
