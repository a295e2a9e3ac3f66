"""What a run adds to the dashboard's tallies (threads/services/tallies.py), heard as it runs and
written as it ends: how long it took, how long until its first token, its tool calls and failures."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from django.utils import timezone

from orchestrator.events import (
    BaseListener,
    Outcome,
    ReasoningDelta,
    RunEvent,
    SubAgentActivity,
    SubAgentEvent,
    TextDelta,
    ToolCallStarted,
    ToolResult,
)
from threads.dbthread import on_db_thread
from threads.services.tallies import ToolCount, tallies_add

log = logging.getLogger(__name__)

# What the model streams first: text, its thinking, or a tool call.
_FIRST_TOKEN = (TextDelta, ReasoningDelta, ToolCallStarted)


class RunTallies(BaseListener):
    """One run's figures, from when the run host took the run (its clock starts when it is made)."""

    def __init__(self, *, agent_id: int) -> None:
        self.agent_id = agent_id
        self.started = time.monotonic()
        self.first_token: float | None = None
        self.calls: defaultdict[str, int] = defaultdict(int)
        self.failures: defaultdict[str, int] = defaultdict(int)

    def on_event(self, event: RunEvent) -> None:
        if self.first_token is None and isinstance(event, _FIRST_TOKEN):
            self.first_token = time.monotonic() - self.started
        elif type(event) is ToolResult:
            self._count(event)

    def on_subagent(self, event: SubAgentEvent) -> None:
        # A sub-agent's tool calls are calls like any other; its first token is not the run's.
        if type(event) is SubAgentActivity and type(event.event) is ToolResult:
            self._count(event.event)

    def _count(self, result: ToolResult) -> None:
        self.calls[result.name] += 1
        if result.is_error:
            self.failures[result.name] += 1

    async def record(self, outcome: Outcome) -> None:
        """Adds the run, ended with ``outcome``, to the tallies. Never raises: a run's end is recorded
        whether or not its figures could be."""
        tools = {name: ToolCount(calls, self.failures.get(name, 0)) for name, calls in self.calls.items()}
        try:
            await on_db_thread(
                tallies_add,
                agent_id=self.agent_id,
                outcome=outcome.value,
                ended_at=timezone.now(),
                duration_seconds=time.monotonic() - self.started,
                first_token_seconds=self.first_token,
                tools=tools,
            )
        except Exception:
            log.exception("could not add a run of agent %s to the dashboard's tallies", self.agent_id)
