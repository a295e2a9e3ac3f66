"""Spend caps: what a run may still spend, as the loop sees it at each step.

The loop knows nothing of who pays or where spend is kept: it asks its ``SpendGate`` at each
iteration's boundary (before any model call of the step) to settle what the run has spent so far
and say where every cap stands. A cap reached stops the run there (``orchestrator/steps.py``), with
its work committed; the error's code is ``budget_exceeded``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

BUDGET_EXCEEDED = "budget_exceeded"


@dataclass(slots=True, frozen=True)
class CapStanding:
    """One cap: ``name`` says whose and over what period (``user_daily``, ``agent_monthly``...)."""

    name: str
    label: str  # for people: "the daily budget of user alice"
    limit_usd: float
    spent_usd: float
    resets_at: datetime  # the start of the next UTC day or month

    @property
    def left_usd(self) -> float:
        return max(0.0, self.limit_usd - self.spent_usd)

    @property
    def reached(self) -> bool:
        return self.spent_usd >= self.limit_usd

    def refusal(self) -> str:
        """What a person is told when this cap stops a run."""
        resets = self.resets_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        return (
            f"{self.label} (${self.limit_usd:.2f}) is spent: ${self.spent_usd:.2f} so far; it resets at {resets} (UTC)"
        )


@dataclass(slots=True, frozen=True)
class BudgetStanding:
    """Every cap that applies to a run, as it stands now (none: nothing is capped). Also a run event:
    the state document shows it."""

    caps: tuple[CapStanding, ...] = ()

    def reached(self) -> CapStanding | None:
        """The first cap reached, if any."""
        return next((cap for cap in self.caps if cap.reached), None)

    def tightest(self) -> CapStanding | None:
        """The cap with the least left."""
        return min(self.caps, key=lambda cap: cap.left_usd, default=None)


class BudgetExceeded(Exception):
    """A spend cap stopped the run (RUN_ERROR ``budget_exceeded``)."""

    code = BUDGET_EXCEEDED

    def __init__(self, cap: CapStanding) -> None:
        super().__init__(cap.refusal())
        self.cap = cap
        self.message = cap.refusal()


class SpendGate(Protocol):
    async def settle(self) -> BudgetStanding:
        """Records what the run spent since the last call and returns where its caps stand."""
        ...
