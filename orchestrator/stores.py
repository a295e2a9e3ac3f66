"""Where a run's conversation is kept: the loop's store (a thread's session), and a sub-agent's,
which is a session store that also records the child's run."""

from __future__ import annotations

from typing import Any, Protocol

from orchestrator.events import AssistantMessage, PauseReason, ToolMessage
from orchestrator.providers.base import TokenCount
from orchestrator.waits import Checkpoint


class SessionStore(Protocol):
    """Where the model's view of the conversation lives between runs."""

    async def load_turns(self) -> list[dict[str, Any]]: ...

    async def commit(
        self,
        turns: list[dict[str, Any]],
        messages: list[AssistantMessage | ToolMessage],
        usage: TokenCount,
        *,
        reads: dict[str, str] | None = None,
        step: Checkpoint | None = None,
    ) -> None:
        """Saves the turns and appends the new transcript messages, atomically; with ``reads``, the
        read ledger (orchestrator/tools/ledger.py) the conversation's next runs start from; with
        ``step``, the running run's checkpoint after what is committed, in the same transaction, for
        whoever takes the run over if its process dies (issue #45)."""
        ...

    async def pause(self, reason: PauseReason) -> None:
        """Records why the run stopped; the turns committed so far are the checkpoint."""
        ...
