"""Writes of a thread's session: the model's view of the conversation, its tokens, its pause."""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from orchestrator.events import AssistantMessage, ToolMessage
from orchestrator.providers.base import TokenCount
from threads import fastsql
from threads.dbthread import shared_write
from threads.locking import again_after_a_race
from threads.models import Run, Session
from threads.services.tokens import token_counts
from threads.services.transcript import append_statements, transcript_body
from threads.takeover import RunTakenOver, still_ours


@again_after_a_race
@shared_write
def session_commit(
    *,
    session_id: uuid.UUID,
    thread_id: uuid.UUID,
    run_id: uuid.UUID,
    turns: list[dict[str, Any]],
    messages: list[AssistantMessage | ToolMessage],
    usage: TokenCount,
    reads: dict[str, str] | None = None,
    step: dict[str, Any] | None = None,
    takeovers: int = 0,
) -> None:
    """Saves the model's view of the conversation and appends the new transcript messages; with
    ``reads``, the read ledger the conversation's next runs start from; with ``step``, the running
    run's checkpoint as it stands after them (its Run row's ``checkpoint``), in the same batch: a
    process that dies leaves a checkpoint that matches the turns and transcript, never one step
    behind or ahead of them (threads/takeover.py goes on from it). A step is committed only while the
    run is still this process's (``takeovers``: how often it had been taken over when this process
    took it): else nothing is, and RunTakenOver is raised.

    Once per model call, so its statements are built once and go to the database together
    (threads/fastsql.py): the ORM's compilation of these updates, and then their round trips to
    PostgreSQL, were most of a run's fixed cost with a hundred runs at once (bench/stream.py
    --concurrent). The session's row is written before the transcript's append, which its lock
    orders (queue_take, the other writer, locks it too), and after the run's, the order every
    writer of both keeps (threads/locking.py)."""
    counts = token_counts(usage)
    statements = [
        fastsql.update_statement(
            Session,
            session_id,
            setting={"turns": turns, "updated_at": timezone.now(), **({} if reads is None else {"reads": reads})},
            adding=counts,
        ),
        *append_statements(thread_id=thread_id, bodies=[transcript_body(m) for m in messages]),
    ]
    if any(counts.values()) or step is not None:
        # The run's row first (see above); a commit before the model's reply adds nothing to it.
        setting = {} if step is None else {"checkpoint": step}
        statements.insert(0, fastsql.update_statement(Run, run_id, setting=setting, adding=counts))
    if step is not None:
        statements.append(still_ours(run_id, takeovers))
    if not fastsql.execute(*statements) and step is not None:
        raise RunTakenOver(f"run {run_id} was taken over by another process")


def session_pause(*, session_id: uuid.UUID, reason: str) -> None:
    """Marks the session paused by a limit; its committed turns are the checkpoint."""
    Session.objects.filter(pk=session_id).update(paused_reason=reason)
