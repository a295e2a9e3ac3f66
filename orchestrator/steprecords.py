"""Each step of a top-level run on record (issue #45), so a process that takes the run over goes on
from it.

A step is committed with the run's checkpoint as it stands (``StepRecords.checkpoint``): the user's
turn, each model turn, each tool call's result as the call ends (``StepResults``), each iteration's
end. After a takeover, the calls a dead process left without a stored result are settled here
(``StepRecords.interrupted``): those that may not run again fail with their effect unknown; the rest
run again. A sub-agent's steps are not kept: one in flight when its process dies fails its delegation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.events import AssistantMessage, RunListener, ToolMessage, ToolResult
from orchestrator.providers.base import TokenCount
from orchestrator.steps import Progress
from orchestrator.stores import SessionStore
from orchestrator.takeover import INTERRUPTED_UNKNOWN, runs_again
from orchestrator.tools.base import ToolRegistry
from orchestrator.waits import Checkpoint, DoneCall, Resumption


@dataclass(slots=True, frozen=True)
class StepRecords:
    """A loop's steps as they are committed: its store, the read ledger its tools share (what the
    stale-edit check reads, kept with every checkpoint), and whether its steps are kept at all."""

    store: SessionStore
    reads: dict[str, str]
    kept: bool  # False for a sub-agent's loop

    def checkpoint(self, run: Progress, done: dict[str, DoneCall] | None = None) -> Checkpoint | None:
        """The run's checkpoint as it stands, committed with the step; None when steps are not kept."""
        if not self.kept:
            return None
        return Checkpoint(done=dict(done or {}), counters=run.counters(), reads=dict(self.reads))

    async def commit(
        self,
        run: Progress,
        messages: list[AssistantMessage | ToolMessage] | None = None,
        usage: TokenCount | None = None,
        *,
        done: dict[str, DoneCall] | None = None,
        ledger: bool = False,
    ) -> None:
        """Commits a step: the run's turns, the new transcript messages and their usage, with the
        checkpoint after them (and, with ``ledger``, the read ledger the thread's next runs start from)."""
        reads = self.reads if ledger else None
        step = self.checkpoint(run, done)
        await self.store.commit(run.turns, messages or [], usage or TokenCount(), reads=reads, step=step)

    def results(self, run: Progress, done: dict[str, DoneCall]) -> StepResults:
        """Where the calls of one turn store their results as each ends, going on from ``done``."""
        return StepResults(self, run, done)

    async def interrupted(
        self,
        calls: list[dict[str, Any]],
        run: Progress,
        checkpoint: Checkpoint,
        *,
        tools: ToolRegistry,
        make_id: Callable[[str], str],
        listener: RunListener,
    ) -> Resumption:
        """The calls a dead process left without a stored result, after a takeover: those that may
        not run again get a failed result saying their effect is unknown, stored and reported now;
        the rest (read-only) run again. Returns what the turn's calls go on from."""
        done = dict(checkpoint.done)
        for call in calls:
            if call["id"] in done or runs_again(call, tools):
                continue
            failed = DoneCall(INTERRUPTED_UNKNOWN, True, make_id("tool"))
            done[call["id"]] = failed
            message = ToolMessage(failed.message_id, call["id"], failed.content)
            await self.commit(run, [message], done=done)
            listener.on_event(ToolResult(call["id"], call["name"], failed.content, True, failed.message_id))
            listener.on_message(message)
        return Resumption(Checkpoint(done=done), {})


class StepResults:
    """Stores each tool call's result as the call ends, with the run's checkpoint (the batch's
    results so far): a process that dies mid-batch leaves what its finished calls did on record, and
    none of them is run again or reported unknown by the process that takes the run over. One at a
    time, so the checkpoints reach the database in the order they grow."""

    def __init__(self, records: StepRecords, run: Progress, done: dict[str, DoneCall]) -> None:
        self.records = records
        self.run = run
        self.done = dict(done)
        self.lock = asyncio.Lock()

    async def stored(self, call_id: str, done: DoneCall, message: ToolMessage) -> None:
        async with self.lock:
            self.done[call_id] = done
            await self.records.commit(self.run, [message], done=self.done)
