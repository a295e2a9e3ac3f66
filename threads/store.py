"""The loop's SessionStore, in the database: a thread's session and transcript."""

from __future__ import annotations

import uuid
from typing import Any

from orchestrator.events import AssistantMessage, PauseReason, SubAgentStarted, ToolMessage
from orchestrator.providers.base import TokenCount
from orchestrator.subagents import SubAgentParams, SubAgentResult
from orchestrator.verdict import conclusion_of
from orchestrator.waits import Checkpoint
from threads.dbthread import on_db_thread, on_db_thread_shared
from threads.services.sessions import session_commit, session_pause
from threads.services.subagents import subagent_begin, subagent_commit, subagent_end
from threads.takeover import RunTakenOver, step_record


class DbSessionStore:
    """``client_tools``: the tools the run's client offered, kept with each step's checkpoint, so the
    process that takes the run over offers the model the same tools. ``takeovers``: how often the run
    had been taken over when this process took it; a step is committed only while that holds."""

    def __init__(
        self,
        *,
        session_id: uuid.UUID,
        thread_pk: uuid.UUID,
        run_pk: uuid.UUID,
        turns: list[dict[str, Any]],
        client_tools: list[dict[str, Any]] | None = None,
        takeovers: int = 0,
    ) -> None:
        self.session_id = session_id
        self.thread_pk = thread_pk
        self.run_pk = run_pk
        self.turns = turns
        self.client_tools = client_tools or []
        self.takeovers = takeovers
        self.taken_over = False  # a commit found the run taken over by another process

    async def load_turns(self) -> list[dict[str, Any]]:
        return list(self.turns)

    async def commit(
        self,
        turns: list[dict[str, Any]],
        messages: list[AssistantMessage | ToolMessage],
        usage: TokenCount,
        *,
        reads: dict[str, str] | None = None,
        step: Checkpoint | None = None,
    ) -> None:
        try:
            await on_db_thread_shared(
                session_commit,
                session_id=self.session_id,
                thread_id=self.thread_pk,
                run_id=self.run_pk,
                turns=turns,
                messages=messages,
                usage=usage,
                reads=None if reads is None else dict(reads),
                step=None if step is None else step_record(step, self.client_tools),
                takeovers=self.takeovers,
            )
        except RunTakenOver:
            self.taken_over = True
            raise

    async def pause(self, reason: PauseReason) -> None:
        await on_db_thread(session_pause, session_id=self.session_id, reason=reason.value)


class DbSubAgentStore:
    """A sub-agent's run in the database: a SubAgentTask, and its messages in the thread's transcript.

    Its conversation is its own (a child starts from nothing); while it waits for an
    answer, it is kept in its parent's checkpoint (orchestrator/waits.py). ``run_pk`` is the
    parent's Run row of this AG-UI run.
    """

    def __init__(
        self,
        *,
        thread_pk: uuid.UUID,
        session_id: uuid.UUID,
        run_pk: uuid.UUID,
        started: SubAgentStarted,
        params: SubAgentParams,
    ) -> None:
        self.thread_pk = thread_pk
        self.session_id = session_id
        self.run_pk = run_pk
        self.started = started
        self.params = params
        self.turns: list[dict[str, Any]] = []

    async def load_turns(self) -> list[dict[str, Any]]:
        return list(self.turns)

    async def commit(
        self,
        turns: list[dict[str, Any]],
        messages: list[AssistantMessage | ToolMessage],
        usage: TokenCount,
        *,
        reads: dict[str, str] | None = None,
        step: Checkpoint | None = None,
    ) -> None:
        # A child's read ledger is its own (see SubAgentStore.commit). Its steps are not checkpointed:
        # a sub-agent in flight when its process dies is failed, not continued (threads/takeover.py).
        self.turns = turns
        await on_db_thread(
            subagent_commit,
            session_id=self.session_id,
            run_id=self.run_pk,
            task_id=self.started.task_id,
            messages=messages,
            usage=usage,
        )

    async def pause(self, reason: PauseReason) -> None:
        pass  # a child stopped by its cap ends there; its parent is told

    async def begin(self) -> None:
        started, params = self.started, self.params
        await on_db_thread(
            subagent_begin,
            task_id=started.task_id,
            thread_id=self.thread_pk,
            run_id=self.run_pk,
            parent_task_id=started.parent_task_id,
            tool_call_id=started.tool_call_id,
            depth=started.depth,
            role=started.role,
            prompt=started.prompt,
            context=params.context,
            system_prompt=params.system_prompt,
            allowed_tools=list(params.allowed_tools),
            model=started.model,
        )

    async def end(self, result: SubAgentResult) -> None:
        await on_db_thread(
            subagent_end,
            task_id=self.started.task_id,
            status=result.status.value,
            summary=result.summary,
            conclusion=conclusion_of(result.status.value, result.summary),
            error=result.error,
            tool_calls=result.tool_calls,
            iterations=result.iterations,
        )
