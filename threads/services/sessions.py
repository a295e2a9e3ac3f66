"""Writes of a thread's session: the model's view of the conversation, its tokens, its pause."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents.events import AssistantMessage, ToolMessage
from agents.providers.base import TokenCount
from threads.models import Run, Session
from threads.services.tokens import tokens_added
from threads.services.transcript import messages_append, transcript_body


@transaction.atomic
def session_commit(
    *,
    session_id: uuid.UUID,
    run_id: uuid.UUID,
    turns: list[dict[str, Any]],
    messages: list[AssistantMessage | ToolMessage],
    usage: TokenCount,
) -> None:
    """Saves the model's view of the conversation and appends the new transcript messages."""
    session = Session.objects.select_for_update().only("thread_id").get(pk=session_id)
    # update() leaves auto_now alone: updated_at is set here, as save() set it.
    Session.objects.filter(pk=session_id).update(turns=turns, updated_at=timezone.now(), **tokens_added(usage))
    Run.objects.filter(pk=run_id).update(**tokens_added(usage))
    messages_append(thread_id=session.thread_id, bodies=[transcript_body(m) for m in messages])


def session_pause(*, session_id: uuid.UUID, reason: str) -> None:
    """Marks the session paused by a limit; its committed turns are the checkpoint."""
    Session.objects.filter(pk=session_id).update(paused_reason=reason)
