"""Messages sent while a run is in flight, in the database.

``run_open`` (threads/services/runs.py) queues a new message when its thread is busy,
under the thread's row lock. From there a message is taken exactly once:
- the run in flight reads it at its next tool boundary (``DbInbox.take``), or
- it starts the next run (``queue_hand_over``, through ``run_open`` and the same
  lock), when the run in flight ended without reading it. The process that
  finished the run hands over at once; the process whose request carried the
  message, and the sweep of every process, do it when that process died first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from orchestrator.queued import Queued, join_queued
from threads import fastsql, leases
from threads.locking import again_after_a_race
from threads.models import QueuedMessage, Run, Session, Thread
from threads.services.transcript import message_preview, messages_append


def queue_message(
    thread: Thread,
    *,
    message: dict[str, Any],
    content: Any,
    agui_run_id: str,
    protocol_version: str,
    client_tools: list[dict[str, Any]],
) -> QueuedMessage:
    """Stores a message for the thread's run in flight (the caller holds the thread's lock)."""
    return QueuedMessage.objects.create(
        thread=thread,
        message_id=message["id"],
        body=message,
        content=content if content is not None else message_preview(message),
        agui_run_id=agui_run_id,
        protocol_version=protocol_version,
        client_tools=client_tools,
    )


def _queued(row: QueuedMessage) -> Queued:
    return Queued(
        request_id=row.agui_run_id, display=message_preview(row.body), content=row.content, announced=row.announced
    )


class DbInbox:
    """A run's inbox (orchestrator/queued.py): the messages queued on its thread."""

    def __init__(self, *, thread_pk: uuid.UUID, session_id: uuid.UUID, run_pk: uuid.UUID) -> None:
        self.thread_pk = thread_pk
        self.session_id = session_id
        self.run_pk = run_pk

    async def take(self, turns: list[dict[str, Any]]) -> list[Queued]:
        from threads.dbthread import on_db_thread_shared

        # Shared: a hundred runs starting at once each ask before their first model call, right
        # after their sessions' commits, and one crossing to the database thread for all of them
        # beat a crossing each (bench/stream.py --concurrent). Its writes are its own transaction.
        return await on_db_thread_shared(
            queue_take, thread_pk=self.thread_pk, session_id=self.session_id, run_pk=self.run_pk, turns=turns
        )


@again_after_a_race
def queue_take(
    *, thread_pk: uuid.UUID, session_id: uuid.UUID, run_pk: uuid.UUID, turns: list[dict[str, Any]]
) -> list[Queued]:
    """What the run reads at a tool boundary, with the turns and transcript saved to match."""
    # Asked at every tool boundary: one indexed read when nothing waits, no transaction.
    if not fastsql.exists(QueuedMessage, status=QueuedMessage.Status.QUEUED, thread=thread_pk):
        return []
    with transaction.atomic():
        rows = list(
            QueuedMessage.objects.select_for_update(no_key=True)
            .filter(status=QueuedMessage.Status.QUEUED, thread_id=thread_pk)
            .order_by("queued_at")
        )
        if not rows:
            return []
        queued = [_queued(row) for row in rows]
        # The queued messages, then the session (threads/locking.py).
        session = Session.objects.select_for_update(no_key=True).get(pk=session_id)
        session.turns = [*turns[:-1], join_queued(turns[-1], queued)]
        session.save(update_fields=["turns", "updated_at"])
        messages_append(thread_id=thread_pk, bodies=[row.body for row in rows])
        QueuedMessage.objects.filter(pk__in=[row.pk for row in rows]).update(
            status=QueuedMessage.Status.READ, run_id=run_pk, taken_at=timezone.now(), announced=True
        )
    return queued


@dataclass(slots=True, frozen=True)
class Fate:
    """Where a queued message stands, for the request that carried it."""

    status: str
    run_pk: uuid.UUID | None  # the run that took it (read or started), or None
    busy_run_pk: uuid.UUID | None  # while it waits: the run in flight on its thread, or None when none is
    # While it waits: the thread's run waits for an answer (the run that goes on will read it).
    behind_question: bool = False
    error: str = ""  # why its run could not be opened (refused)


def _holds(thread_pks: list[uuid.UUID], live_run_ids: set[uuid.UUID]) -> dict[uuid.UUID, tuple[uuid.UUID | None, bool]]:
    """What holds each thread, in one query: its run in flight in a live process (or None), and
    whether a run of it waits for an answer. A run whose process is gone holds nothing; one of
    ``live_run_ids`` (the asking process's own) holds its thread even if its lease lapsed, as
    ``run_open`` judges it: a loaded process renews late, and the two must not disagree, or a
    follower would keep handing over a message that ``run_open`` keeps turning down."""
    holds: dict[uuid.UUID, tuple[uuid.UUID | None, bool]] = {}
    now = timezone.now()
    open_runs = Run.objects.filter(thread_id__in=thread_pks, status__in=(Run.Status.RUNNING, Run.Status.WAITING))
    for pk, thread_pk, status, owner, lease in open_runs.values_list(
        "id", "thread_id", "status", "owner", "lease_expires_at"
    ):
        busy, waiting = holds.get(thread_pk, (None, False))
        if status == Run.Status.WAITING:
            waiting = True
        elif pk in live_run_ids or not leases.owner_is_gone(owner, lease, now):
            busy = pk
        holds[thread_pk] = (busy, waiting)
    return holds


def queue_fate(*, queued_pk: uuid.UUID, live_run_ids: set[uuid.UUID]) -> Fate | None:
    row = QueuedMessage.objects.filter(pk=queued_pk).values_list("status", "run_id", "thread_id", "error").first()
    if row is None:
        return None
    status, run_pk, thread_pk, error = row
    if status != QueuedMessage.Status.QUEUED:
        return Fate(status=status, run_pk=run_pk, busy_run_pk=None, error=error)
    busy, waiting = _holds([thread_pk], live_run_ids).get(thread_pk, (None, False))
    return Fate(status=status, run_pk=run_pk, busy_run_pk=busy, behind_question=waiting)


@dataclass(slots=True, frozen=True)
class HandOver:
    """The oldest message still queued on a thread that nothing runs on: what its run starts with."""

    queued_pk: uuid.UUID
    agent_name: str
    agui_run_id: str
    protocol_version: str
    message: dict[str, Any]
    content: Any
    client_tools: list[dict[str, Any]]
    owner_id: int | None


def queue_next(*, agui_thread_id: str) -> HandOver | None:
    """The message the next run of the thread starts with, if one is queued (not yet claimed:
    ``run_open`` with ``from_queue`` claims it under the thread's lock)."""
    row = (
        QueuedMessage.objects.filter(status=QueuedMessage.Status.QUEUED, thread__agui_thread_id=agui_thread_id)
        .select_related("thread__agent")
        .order_by("queued_at")
        .first()
    )
    if row is None:
        return None
    return HandOver(
        queued_pk=row.pk,
        agent_name=row.thread.agent.name,
        agui_run_id=row.agui_run_id,
        protocol_version=row.protocol_version,
        message=row.body,
        content=row.content,
        client_tools=row.client_tools,
        owner_id=row.thread.owner_id,
    )


def queue_claim(thread: Thread, *, queued_pk: uuid.UUID) -> QueuedMessage | None:
    """Under the thread's lock: the queued message, if it is still the oldest one waiting."""
    oldest = (
        QueuedMessage.objects.select_for_update(no_key=True)
        .filter(status=QueuedMessage.Status.QUEUED, thread=thread)
        .order_by("queued_at")
        .first()
    )
    return oldest if oldest is not None and oldest.pk == queued_pk else None


def queue_started(row: QueuedMessage, *, run_pk: uuid.UUID) -> None:
    QueuedMessage.objects.filter(pk=row.pk).update(
        status=QueuedMessage.Status.STARTED, run_id=run_pk, taken_at=timezone.now(), announced=True
    )


def queue_refuse(*, queued_pk: uuid.UUID, error: str) -> None:
    """The queued message's run could not be opened, for a reason that will not pass: its request
    is told, and nothing retries it."""
    QueuedMessage.objects.filter(pk=queued_pk, status=QueuedMessage.Status.QUEUED).update(
        status=QueuedMessage.Status.REFUSED, error=error, taken_at=timezone.now()
    )


def queue_announce(*, run_ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, str, str]]:
    """Messages queued on the threads of these runs that their run has not been told of yet:
    (run pk, request id, display) each, now marked as told."""
    rows = list(
        QueuedMessage.objects.filter(
            status=QueuedMessage.Status.QUEUED,
            announced=False,
            thread__runs__id__in=run_ids,
            thread__runs__status=Run.Status.RUNNING,
        ).values_list("pk", "thread__runs__id", "agui_run_id", "body")
    )
    if not rows:
        return []
    QueuedMessage.objects.filter(pk__in=[row[0] for row in rows]).update(announced=True)
    return [(run_pk, request_id, message_preview(body)) for _pk, run_pk, request_id, body in rows if run_pk in run_ids]


def queue_mark_announced(*, queued_pk: uuid.UUID) -> None:
    QueuedMessage.objects.filter(pk=queued_pk).update(announced=True)


def queue_stranded(*, older_than: float, live_run_ids: set[uuid.UUID]) -> list[str]:
    """Threads with a message queued for a while and no run to read it, neither live nor waiting
    for an answer (its process died between queueing and handing over): the sweep hands them over."""
    since = timezone.now() - timedelta(seconds=older_than)
    threads = set(
        QueuedMessage.objects.filter(status=QueuedMessage.Status.QUEUED, queued_at__lt=since).values_list(
            "thread_id", "thread__agui_thread_id"
        )[:100]
    )
    holds = _holds([thread_pk for thread_pk, _ in threads], live_run_ids)
    stranded = []
    for thread_pk, agui_thread_id in threads:
        busy, waiting = holds.get(thread_pk, (None, False))
        if busy is None and not waiting:
            stranded.append(agui_thread_id)
    return stranded
