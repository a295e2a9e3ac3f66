"""A run's spend caps (issue #48): the check at the door, and the meter that settles a run's spend.

The door: a request that brings a new message is refused (RUN_ERROR ``budget_exceeded``) before
anything is stored or the model is called, when a cap of its thread's payer or its agent is reached.
The meter: every model call of the run is heard (``on_usage``: its own, its sub-agents', its
compactions'); at each step the loop asks it to settle (threads/services/spending.py adds what was
spent to the day's row, agents/spending.py reads where the caps stand) and stops the run when one is
reached. At the run's end the host settles what is left, before the run's end is recorded.
"""

from __future__ import annotations

import logging

from django.utils import timezone

from agents.models import Agent
from agents.spending import Cap, budget_caps, spend_standing
from orchestrator.budget import BudgetStanding, CapStanding
from orchestrator.events import BaseListener, Usage
from threads import fastsql
from threads.dbthread import on_db_thread
from threads.models import Thread
from threads.selectors import agent_get
from threads.services.spending import spend_add

log = logging.getLogger(__name__)


def budget_reached(*, agent_name: str, agui_thread_id: str, owner_id: int | None) -> CapStanding | None:
    """The cap a new message on the thread would start over, if one is reached. The payer is the
    thread's owner; a new thread's is the requester (``owner_id``; None: the shared token)."""
    agent = agent_get(name=agent_name)
    if agent is None:
        return None  # the run's opening says there is no such agent
    found = fastsql.first_values(Thread, ("owner",), agui_thread_id=agui_thread_id)
    payer = found[0] if found is not None else owner_id
    caps = budget_caps(agent=agent, user_id=payer)
    return spend_standing(agent=agent, user_id=payer, caps=caps, now=timezone.now()).reached()


def _settle(
    *, agent: Agent, user_id: int | None, usages: list[Usage], caps: list[Cap] | None
) -> tuple[list[Cap], BudgetStanding]:
    now = timezone.now()
    spend_add(agent_id=agent.pk, user_id=user_id, usages=usages, now=now)
    if caps is None:
        caps = budget_caps(agent=agent, user_id=user_id)
    return caps, spend_standing(agent=agent, user_id=user_id, caps=caps, now=now)


class SpendMeter(BaseListener):
    """One run's spend: the calls heard since the last settle, and the loop's ``SpendGate``."""

    def __init__(self, *, agent: Agent, user_id: int | None) -> None:
        self.agent = agent
        self.user_id = user_id
        self.pending: list[Usage] = []
        # The run's caps, read at its first step: an override changed in the admin meanwhile applies
        # from the next run on.
        self.caps: list[Cap] | None = None

    def on_usage(self, usage: Usage) -> None:
        self.pending.append(usage)

    async def settle(self) -> BudgetStanding:
        # Taken before the wait: a sub-agent's call heard meanwhile is the next settle's.
        usages, self.pending = self.pending, []
        self.caps, standing = await on_db_thread(
            _settle, agent=self.agent, user_id=self.user_id, usages=usages, caps=self.caps
        )
        return standing

    async def flush(self) -> None:
        """What the run spent since its last step, recorded at its end."""
        usages, self.pending = self.pending, []
        if usages:
            await on_db_thread(
                spend_add, agent_id=self.agent.pk, user_id=self.user_id, usages=usages, now=timezone.now()
            )
