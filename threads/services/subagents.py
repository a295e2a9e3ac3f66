"""Writes of sub-agent tasks: a child run begins, commits its messages and tokens, ends, or is
stopped with the dead process that ran it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from orchestrator.events import AssistantMessage, ToolMessage
from orchestrator.providers.base import TokenCount
from orchestrator.verdict import conclusion_of
from threads.locking import again_after_a_race
from threads.models import Run, Session, SubAgentTask, Thread
from threads.services.tokens import tokens_added
from threads.services.transcript import messages_append, transcript_body


def subagent_begin(
    *,
    task_id: str,
    thread_id: uuid.UUID,
    run_id: uuid.UUID,
    parent_task_id: str,
    tool_call_id: str,
    depth: int,
    role: str,
    prompt: str,
    context: str,
    system_prompt: str,
    allowed_tools: list[str],
    model: str,
) -> None:
    SubAgentTask.objects.create(
        id=task_id,
        thread_id=thread_id,
        run_id=run_id,
        parent_task_id=parent_task_id or None,
        tool_call_id=tool_call_id,
        depth=depth,
        role=role,
        prompt=prompt,
        context=context,
        system_prompt=system_prompt,
        allowed_tools=allowed_tools,
        model=model,
    )


@again_after_a_race
@transaction.atomic
def subagent_commit(
    *,
    session_id: uuid.UUID,
    run_id: uuid.UUID,
    task_id: str,
    messages: list[AssistantMessage | ToolMessage],
    usage: TokenCount,
) -> None:
    """A sub-agent's new messages join the thread's transcript, marked as its own (``subagentRunId``,
    first, as the protocol's models order it); its tokens count on the session, the run and the task."""
    # The run, its task, then the session (threads/locking.py); the session's lock orders the
    # transcript's writers (services/sessions.py).
    counted = usage.input_tokens or usage.output_tokens or usage.cache_read_tokens or usage.cache_write_tokens
    tokens = tokens_added(usage)
    if counted:
        Run.objects.filter(pk=run_id).update(**tokens)
        SubAgentTask.objects.filter(pk=task_id).update(**tokens)
    session = Session.objects.select_for_update(no_key=True).only("thread_id").get(pk=session_id)
    if counted:
        Session.objects.filter(pk=session_id).update(**tokens)
    bodies = [{"subagentRunId": task_id, **transcript_body(m)} for m in messages]
    messages_append(thread_id=session.thread_id, bodies=bodies)


def subagent_end(
    *,
    task_id: str,
    status: str,
    summary: str,
    conclusion: str,
    error: str,
    tool_calls: list[dict[str, Any]],
    iterations: int,
) -> None:
    SubAgentTask.objects.filter(pk=task_id).update(
        status=status,
        summary=summary,
        conclusion=conclusion[:300],
        error=error,
        tool_calls=tool_calls,
        iterations=iterations,
        finished_at=timezone.now(),
    )


def subagents_interrupt(*, thread: Thread, run_ids: list[uuid.UUID], now: datetime) -> None:
    """The sub-agents of runs whose process is gone stopped with them: on the record and on the
    board (where a task the dead process had not yet saved in the document is added)."""
    stopped = list(SubAgentTask.objects.filter(run_id__in=run_ids, status=SubAgentTask.Status.RUNNING))
    if not stopped:
        return
    why = "the server stopped while it ran"
    SubAgentTask.objects.filter(id__in=[task.id for task in stopped]).update(
        status=SubAgentTask.Status.INTERRUPTED, conclusion=conclusion_of("interrupted", ""), error=why, finished_at=now
    )
    state = thread.state if isinstance(thread.state, dict) else {}
    board = state.setdefault("subAgents", [])
    on_board = {entry.get("id"): entry for entry in board if isinstance(entry, dict)}
    for task in stopped:
        entry = on_board.get(task.id)
        if entry is None:
            entry = {
                "id": task.id,
                "role": task.role,
                "prompt": task.prompt,
                "model": task.model,
                "depth": task.depth,
                "toolCallId": task.tool_call_id,
                "summary": task.summary,
            }
            if task.parent_task_id:
                entry["parentId"] = task.parent_task_id
            board.append(entry)
        entry.update(status="interrupted", conclusion=conclusion_of("interrupted", ""), error=why)
    thread.state = state
    thread.save(update_fields=["state"])
