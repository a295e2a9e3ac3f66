"""What a run spent, added to the day's row of its payer and agent (issue #48; the caps and where
they stand are agents/spending.py's)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import transaction

from agents.models import DailySpend
from orchestrator.events import Usage
from orchestrator.pricing import cost_of
from threads import fastsql


def spend_add(*, agent_id: int, user_id: int | None, usages: Iterable[Usage], now: dt.datetime) -> None:
    """Adds what ``usages`` cost to the day's row of the user and agent (made on first use). Added in
    the database (``SET calls = calls + %s``), so two runs settling at once both count; two first
    writes of one day at once may make two rows, which every read sums."""
    usages = list(usages)
    if not usages:
        return
    added: dict[str, int | float] = {
        "cost_usd": sum(cost_of(usage) for usage in usages),
        "calls": len(usages),
        "input_tokens": sum(u.input_tokens for u in usages),
        "output_tokens": sum(u.output_tokens for u in usages),
        "cache_read_tokens": sum(u.cache_read_tokens for u in usages),
        "cache_write_tokens": sum(u.cache_write_tokens for u in usages),
    }
    day = now.astimezone(dt.UTC).date()
    # By fastsql, not the ORM: a run settles at each step and at its end, and the ORM's read and
    # update cost the database thread 1.4 ms (holding the GIL) where this costs 0.17 ms.
    with transaction.atomic():
        row = fastsql.first_values(DailySpend, ("id",), order_by=("id",), day=day, agent=agent_id, user=user_id)
        if row is not None:
            fastsql.execute(fastsql.update_statement(DailySpend, row[0], setting={}, adding=added))
        else:
            fastsql.insert(DailySpend(day=day, agent_id=agent_id, user_id=user_id, **added))
