"""Writes of a run's life: opening its thread and run, renewing its lease, cancelling and finishing it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from orchestrator.approvals import Answer
from orchestrator.memory import INTERRUPTED, heal_turns
from orchestrator.waits import Checkpoint
from threads import fastsql, leases
from threads.dbthread import shared_write
from threads.healing import runs_heal
from threads.locking import again_after_a_race, again_after_a_race_to_create
from threads.models import Message, QueuedMessage, Run, Session, Thread
from threads.queue import queue_claim, queue_message, queue_started
from threads.selectors import agent_get
from threads.services.attachments import attachments_claim
from threads.services.subagents import subagents_interrupt
from threads.services.transcript import message_preview, messages_append
from threads.takeover import RunTakenOver, can_go_on, queued_if_ours, start_record
from threads.waits import wait_cancel, wait_supersede

# A run in this state is held by a live process; a WAITING run is held by none (threads/waits.py).
LIVE_STATUSES = (Run.Status.RUNNING,)
# A run in these states is not over: it works, or it will go on once answered (pages refresh for it).
OPEN_STATUSES = (Run.Status.RUNNING, Run.Status.WAITING)


class ThreadConflict(Exception):
    """The request names a thread or run in a way the server will not accept (HTTP 409)."""


@dataclass(slots=True, frozen=True)
class Started:
    """A run was opened with the request's message stored."""

    thread: Thread
    session: Session
    agent: Agent
    run: Run
    # The new message superseded a waiting run: what the agent run goes on from.
    superseded: tuple[Checkpoint, dict[str, Answer]] | None = None


@dataclass(slots=True, frozen=True)
class Queued:
    """The thread was busy: the message was queued for the run in flight (threads/queue.py)."""

    queued: QueuedMessage


@dataclass(slots=True, frozen=True)
class Hydrate:
    """The request brought no new message: the thread as it stands is replayed."""

    thread: Thread
    session: Session
    agent: Agent
    # The thread's run waits for answers: that run, to ask its questions again.
    waiting: Run | None = None


@dataclass(slots=True, frozen=True)
class TakenElsewhere:
    """A queued message's run was not opened: another request or process took the message first,
    or a run in flight (or the waiting one, once answered) will read it."""


Opened = Started | Queued | Hydrate | TakenElsewhere


class ThreadNotReachable(ThreadConflict):
    """The thread belongs to another user (HTTP 404 before a stream starts; RUN_ERROR after)."""


class AgentUnavailable(Exception):
    """No enabled agent has that name (HTTP 404)."""


@again_after_a_race_to_create
@shared_write
def run_open(
    *,
    agent_name: str,
    agui_thread_id: str,
    agui_run_id: str,
    new_user_message: dict[str, Any] | None,
    protocol_version: str,
    live_run_ids: set[uuid.UUID],
    run_pk: uuid.UUID | None = None,
    owner_id: int | None = None,
    content: Any = None,
    client_tools: list[dict[str, Any]] | None = None,
    from_queue: uuid.UUID | None = None,
) -> Opened:
    """Opens the thread (creating it and its session on first use) and, when the
    request brings a new user message, a run with that message stored.

    Runs left ``running`` by a process that is gone are marked interrupted: the
    session heals on this use. A run still held by another live process makes
    the thread busy (ThreadConflict); ``live_run_ids`` are this process's own.

    ``owner_id``: the user whose API token the request carried. A new thread is theirs; another
    user's thread is refused (ThreadNotReachable) with nothing written. None (the shared token)
    reaches every thread and starts unowned ones.

    A message for a thread that a run is busy on (here or in another live process), or that has
    messages queued before it, is queued (``Queued``; threads/queue.py), with ``content`` (what
    the model reads) and ``client_tools`` kept for the run that takes it. ``from_queue`` opens
    the run of a queued message: that message, if it is still the oldest queued and nothing runs
    (``TakenElsewhere`` when not). A request with no new message is a ``Hydrate``.

    This is on the path to a run's first byte, so it keeps to a handful of
    statements in one transaction (bench/stream.py measures it).
    """
    agent = agent_get(name=agent_name)
    if agent is None:
        raise AgentUnavailable(f"no agent named {agent_name!r}")
    # The thread's row first, whatever else is locked below (threads/locking.py). order_by() and
    # a slice rather than first(): no ORDER BY to compile or run.
    found = list(
        Thread.objects.select_for_update(of=("self",), no_key=True)
        .select_related("session")
        .filter(agui_thread_id=agui_thread_id)
        .order_by()[:1]
    )
    if not found:
        title = message_preview(new_user_message) if new_user_message else ""
        thread = Thread(agui_thread_id=agui_thread_id, agent=agent, title=title, owner_id=owner_id)
        session = Session(thread=thread)
        thread.session = session
        if new_user_message is None:
            # A page opened on a thread nobody has written to yet: its snapshots are empty, and
            # nothing is stored (every page load would otherwise leave an empty thread behind).
            return Hydrate(thread, session, agent)
        run = _new_run(thread, agui_run_id, run_pk, protocol_version, content, client_tools)
        message = Message(
            thread=thread, position=0, message_id=new_user_message["id"], role="user", body=new_user_message
        )
        fastsql.insert(thread, session, run, message)
        attachments_claim(thread=thread, message=new_user_message)
        return Started(thread, session, agent, run)
    thread = found[0]
    if owner_id is not None and thread.owner_id != owner_id:
        raise ThreadNotReachable(f"no thread {agui_thread_id} of yours")
    if thread.agent_id != agent.pk:
        owner = Agent.objects.filter(pk=thread.agent_id).values_list("name", flat=True).first()
        raise ThreadConflict(f"thread {agui_thread_id} belongs to agent {owner!r}")
    try:
        session = thread.session
    except Session.DoesNotExist:
        session = Session.objects.create(thread=thread)
    stored = set(Message.objects.filter(thread=thread).values_list("message_id", flat=True))
    waiting = (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .filter(thread=thread, status=Run.Status.WAITING)
        .order_by("-started_at")
        .first()
    )
    if new_user_message is None or new_user_message["id"] in stored:
        return TakenElsewhere() if from_queue is not None else Hydrate(thread, session, agent, waiting=waiting)
    # One read for both: is anything queued, and was this very message queued already?
    queue = list(
        QueuedMessage.objects.filter(thread=thread)
        .filter(
            Q(status=QueuedMessage.Status.QUEUED) | Q(message_id=new_user_message["id"]) | Q(agui_run_id=agui_run_id)
        )
        .values_list("pk", "message_id", "agui_run_id", "status")
    )
    already = [pk for pk, message_id, _, _ in queue if message_id == new_user_message["id"]]
    if from_queue is None and already:
        # The request that queued it, sent again: it follows the message where it went.
        return Queued(QueuedMessage.objects.get(pk=already[0]))
    if from_queue is None and any(run_id == agui_run_id for _, _, run_id, _ in queue):
        raise ThreadConflict(f"run {agui_run_id} already exists on thread {agui_thread_id}; use a new runId")
    queue = [row for row in queue if row[3] == QueuedMessage.Status.QUEUED]
    reused = Run.objects.filter(thread=thread, agui_run_id=agui_run_id)
    if waiting is not None:
        reused = reused.exclude(pk=waiting.pk)  # CopilotKit sends a new message with the waiting run's id
    if reused.exists():
        raise ThreadConflict(f"run {agui_run_id} already exists on thread {agui_thread_id}; use a new runId")
    now = timezone.now()
    running = list(
        Run.objects.filter(thread=thread, status__in=LIVE_STATUSES).only(
            "id", "owner", "lease_expires_at", "checkpoint", "takeovers", "handovers"
        )
    )
    # This process's own runs are live; another's are, until its lease lapses or it is known dead. A
    # dead process's run that can go on is still busy: the sweep of a live process takes it over
    # (threads/takeover.py), and the message waits for it like any message sent to a run in flight.
    gone = [
        run.pk
        for run in running
        if run.pk not in live_run_ids
        and leases.owner_is_gone(run.owner, run.lease_expires_at, now)
        and not can_go_on(run)
    ]
    if gone:
        runs_heal(run_ids=gone, now=now)
        subagents_interrupt(thread=thread, run_ids=gone, now=now)
    busy = len(gone) < len(running)
    # A message sent after a question was put supersedes it (below); one queued before it was put
    # waits for its answer, and the run that goes on reads it.
    if from_queue is None and (busy or (queue and waiting is None)):
        # One active run per thread: the message joins the run in flight, or the
        # next run after the messages queued before it; it is never interleaved into a turn.
        if len(queue) >= settings.QUEUED_MESSAGES_MAX:
            raise ThreadConflict(
                f"{len(queue)} messages already wait for the run in flight on thread {agui_thread_id}; "
                "send this one when it has finished"
            )
        queued = queue_message(
            thread,
            message=new_user_message,
            content=content,
            agui_run_id=agui_run_id,
            protocol_version=protocol_version,
            client_tools=client_tools or [],
        )
        return Queued(queued)
    claimed = queue_claim(thread, queued_pk=from_queue) if from_queue is not None else None
    if from_queue is not None and (busy or claimed is None or waiting is not None):
        # Taken already, or a run will read it: the one in flight, or the waiting one once answered.
        return TakenElsewhere()
    if not thread.title:
        thread.title = message_preview(new_user_message)
        thread.save(update_fields=["title"])
    superseded = None
    if waiting is not None:
        # The user wrote instead of answering: the open calls are closed as superseded and the
        # agent run goes on from its checkpoint with this message.
        superseded = wait_supersede(waiting, message=message_preview(new_user_message), now=now)
        if superseded is None:
            raise ThreadConflict(f"the run waiting on thread {agui_thread_id} was just taken by another request")
    healed, closed = heal_turns(session.turns) if superseded is None else (session.turns, [])
    if session.paused_reason or closed:
        # A message after a pause resumes from the checkpoint: the turns are all there.
        # Calls a stopped run left open are closed, in the session and in the
        # transcript, before the new message, where they belong.
        session.paused_reason = ""
        session.turns = healed
        session.save(update_fields=["paused_reason", "turns"])
        closings = [
            {"id": f"tool_{uuid.uuid4().hex}", "role": "tool", "content": INTERRUPTED, "toolCallId": call_id}
            for call_id in closed
        ]
        messages_append(thread_id=thread.pk, bodies=closings)
        stored |= {closing["id"] for closing in closings}
    run = _new_run(thread, agui_run_id, run_pk, protocol_version, content if superseded is None else None, client_tools)
    if superseded is not None:
        run.parent = waiting  # it goes on from the waiting run's checkpoint, which its host resumes
    # Positions are contiguous from 0, so the next one is the count already stored.
    message_id = new_user_message["id"]
    fastsql.insert(
        run, Message(thread=thread, position=len(stored), message_id=message_id, role="user", body=new_user_message)
    )
    attachments_claim(thread=thread, message=new_user_message)
    if claimed is not None:
        queue_started(claimed, run_pk=run.pk)
    return Started(thread, session, agent, run, superseded=superseded)


def _new_run(
    thread: Thread,
    agui_run_id: str,
    run_pk: uuid.UUID | None,
    protocol_version: str,
    content: Any,
    client_tools: list[dict[str, Any]] | None,
) -> Run:
    """A new running run of this process; with ``content`` (the user's turn), its start record, so
    that it can be taken over before its first step (threads/takeover.py ``start_record``)."""
    return Run(
        id=run_pk or uuid.uuid4(),
        thread=thread,
        agui_run_id=agui_run_id,
        protocol_version=protocol_version,
        owner=leases.owner_id(),
        lease_expires_at=leases.lease_until(),
        checkpoint=None if content is None else start_record(content, client_tools or []),
    )


@dataclass(slots=True, frozen=True)
class Renewed:
    """What renewing the leases found: runs asked to cancel, and runs another process took over
    (this one was taken for dead: it lost them, and must stop without recording them)."""

    cancelled: list[uuid.UUID]
    lost: list[uuid.UUID]


def leases_renew(*, run_ids: list[uuid.UUID]) -> Renewed:
    """Extends this process's claim on the runs it is running and still owns.

    It runs on a connection of its own (runhost/registry.py), beside the database thread, whose
    commits update several runs' rows in one transaction (threads/dbthread.py shared writes). So it
    takes no row another transaction holds (SKIP LOCKED), and PostgreSQL never finds the two waiting
    on each other (a rolling restart of 200 runs found such deadlocks). A run passed over is renewed
    at the next round, a third of a lease later."""
    running = Run.objects.filter(id__in=run_ids, status__in=LIVE_STATUSES)
    owned = running.filter(owner=leases.owner_id())
    with transaction.atomic():
        free = owned.order_by("pk").select_for_update(skip_locked=True, no_key=True).values_list("pk", flat=True)
        Run.objects.filter(pk__in=list(free)).update(lease_expires_at=leases.lease_until())
    lost = running.exclude(owner=leases.owner_id()).values_list("id", flat=True)
    return Renewed(list(owned.filter(cancel_requested=True).values_list("id", flat=True)), list(lost))


class RunNotCancellable(Exception):
    """The run has already ended (HTTP 409)."""


def run_cancel(*, run_id: uuid.UUID) -> None:
    """The one cancel of a run, from any door (the run host, the admin): a waiting run ends at once,
    with its questions; a running one is asked to stop at its next safe point, whichever process
    owns it (it reads the request when it renews its lease). Raises RunNotCancellable when the run
    has already ended. The run host stops a run it executes itself without asking the database."""
    if not wait_cancel(run_id=run_id):
        run_cancel_request(run_id=run_id)


def run_cancel_request(*, run_id: uuid.UUID) -> None:
    """Asks the run to stop at its next safe point, whichever process owns it."""
    updated = Run.objects.filter(pk=run_id, status__in=LIVE_STATUSES).update(cancel_requested=True)
    if not updated:
        raise RunNotCancellable("the run has already ended")


@again_after_a_race
@shared_write
def run_finish(
    *,
    run_id: uuid.UUID,
    thread_id: uuid.UUID,
    status: str,
    outcome: str,
    error: str,
    event_count: int,
    state: dict[str, Any],
    takeovers: int = 0,
) -> bool:
    """Records the run's end and the thread's state document; True when a message waits in the
    thread's queue, for the caller to hand over (one round trip to the database thread, not two:
    this is every run's last fixed cost, bench/stream.py --profile-concurrent). Raises RunTakenOver,
    writing nothing, when another process took the run over since this one had it (``takeovers``)."""
    now = timezone.now()
    ended = {"status": status, "outcome": outcome, "error": error, "event_count": event_count, "finished_at": now}
    # The thread's row before the run's: the order every writer of both keeps (threads/locking.py).
    # One round trip for the three (threads/fastsql.py execute).
    queued = fastsql.execute(
        fastsql.update_statement(Thread, thread_id, setting={"state": state, "updated_at": now}, adding={}),
        fastsql.update_statement(Run, run_id, setting=ended, adding={}),
        queued_if_ours(thread_id, run_id, takeovers),
    )
    if not queued:
        raise RunTakenOver(f"run {run_id} was taken over by another process")
    return bool(queued[0][0])
