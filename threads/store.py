"""The loop's SessionStore, in the database: a thread's session and transcript."""

from __future__ import annotations

from typing import Any

from agents.events import AssistantMessage, PauseReason, ToolMessage
from agents.providers.base import TokenCount
from threads.dbthread import on_db_thread
from threads.services import session_commit, session_pause


class DbSessionStore:
    def __init__(self, *, session_id: Any, run_pk: Any, turns: list[dict[str, Any]]) -> None:
        self.session_id = session_id
        self.run_pk = run_pk
        self.turns = turns

    async def load_turns(self) -> list[dict[str, Any]]:
        return list(self.turns)

    async def commit(
        self, turns: list[dict[str, Any]], messages: list[AssistantMessage | ToolMessage], usage: TokenCount
    ) -> None:
        await on_db_thread(
            session_commit, session_id=self.session_id, run_id=self.run_pk, turns=turns, messages=messages, usage=usage
        )

    async def pause(self, reason: PauseReason) -> None:
        await on_db_thread(session_pause, session_id=self.session_id, reason=reason.value)
