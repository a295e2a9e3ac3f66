"""Running runs whose process died, taken over by another process (issue #45).

A running run's Run row keeps its last step's checkpoint (``checkpoint["step"]``, written with the
step: threads/services/sessions.py ``session_commit``). When its owner's lease lapses, or at once when
the owner was a process of this host that no longer exists, the sweep of any live process claims
it: one conditional update under the run's row lock, so exactly one process wins. The winner goes on
in the same Run row (the same AG-UI run id, the same event log, continued after every id a client of
the dead process can hold: ``UNLOGGED_AHEAD`` past the log's last event).

A run that cannot go on (no step checkpointed yet, or taken over ``RUN_MAX_TAKEOVERS`` times already)
is healed instead: marked interrupted, its log ended with RUN_ERROR (threads/healing.py).
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model, Q
from django.utils import timezone

from agents.models import Agent
from orchestrator.waits import Checkpoint
from threads import fastsql, leases
from threads.eventlog import UNLOGGED_AHEAD, insert_events
from threads.healing import INTERRUPTED_ERROR, runs_heal
from threads.leases import RunTakenOver
from threads.locking import again_after_a_race, thread_lock
from threads.models import QueuedMessage, Run, Session, Thread
from threads.selectors import run_events_after
from threads.services.subagents import subagents_interrupt
from vocabulary import agui as ev

STEP = "step"
# A run's start record holds the user's turn, as the model reads it, until its first step is committed.
USER_TURN = "userTurn"
# The owner of a run its draining process handed over: no process holds it, and the process that takes
# it over counts a hand-over, not a crash.
RELEASED = "released"


def step_record(checkpoint: Checkpoint, client_tools: list[dict[str, Any]]) -> dict[str, Any]:
    """What a running run's row keeps of its last step (``Run.checkpoint``)."""
    return {STEP: checkpoint.to_json(), "clientTools": client_tools}


def start_record(user_turn: str | list[dict[str, Any]], client_tools: list[dict[str, Any]]) -> dict[str, Any]:
    """What a new run's row keeps until its first step is committed (written with the run, by run_open):
    the user's turn as the model reads it. A process that dies before that step (opening the workspace,
    connecting MCP servers, on a loaded machine a second or more) leaves a run another takes over from
    its start, rather than one that can only be ended as interrupted."""
    return {**step_record(Checkpoint(), client_tools), USER_TURN: user_turn}


def _column(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(str(model._meta.get_field(name).column))  # type: ignore[union-attr]


def still_ours(run_id: uuid.UUID, takeovers: int) -> fastsql.Statement:
    """A query whose one row says that the run is still the one this process claimed: not taken over
    since (its ``takeovers`` unchanged). The last statement of a write's batch, so the check costs no
    round trip of its own; no row: the caller raises RunTakenOver and the write is rolled back."""
    table = connection.ops.quote_name(Run._meta.db_table)
    sql = f"SELECT 1 FROM {table} WHERE {_column(Run, 'id')} = %s AND {_column(Run, 'takeovers')} = %s"
    return sql, [fastsql.db_value(Run, "id", run_id), takeovers]


def queued_if_ours(thread_id: uuid.UUID, run_id: uuid.UUID, takeovers: int) -> fastsql.Statement:
    """``still_ours`` that also says whether a message waits in the thread's queue (run_finish's
    last question): no row when the run was taken over, else one, true when a message waits."""
    ours, values = still_ours(run_id, takeovers)
    queue = connection.ops.quote_name(QueuedMessage._meta.db_table)
    waiting = (
        f"SELECT EXISTS (SELECT 1 FROM {queue} WHERE {_column(QueuedMessage, 'thread')} = %s "
        f"AND {_column(QueuedMessage, 'status')} = %s) "
    )
    queued = [fastsql.db_value(QueuedMessage, "thread", thread_id), QueuedMessage.Status.QUEUED.value]
    return waiting + ours.removeprefix("SELECT 1 "), [*queued, *values]


def too_many_takeovers(count: int) -> dict[str, Any]:
    return ev.run_error(
        f"the server process running this run stopped {count + 1} times; it was taken over {count} times "
        "(RUN_MAX_TAKEOVERS) and is ended here so that it cannot stop another: send a new message to go on",
        "takeover_limit",
    )


@dataclass(slots=True)
class TakenOver:
    """This process won a running run whose process died: it goes on in ``run``, from ``checkpoint``.
    ``logged`` are the events of its log that open or close parts (decoded), for the continuation to
    close what they left open; its events come after ``after``."""

    run: Run
    thread: Thread
    session: Session
    agent: Agent
    checkpoint: Checkpoint
    client_tools: list[dict[str, Any]]
    # The user's turn of a run taken over before its first step (``start_record``): it starts over with it.
    user_turn: str | list[dict[str, Any]] | None
    logged: list[dict[str, Any]]
    after: int
    count: int  # how many events its log holds
    shown: dict[str, Any]  # this takeover, as its clients are shown it (TAKEOVER_EVENT)


def crashes(run: Run) -> int:
    """How often the run was taken over after its process died (hand-overs at a drain aside)."""
    return run.takeovers - run.handovers


def can_go_on(run: Run) -> bool:
    """The run has a step to go on from, and takeovers left (RUN_MAX_TAKEOVERS counts crashes; a
    hand-over of a draining process needs only a live one to take it, and 0 turns both off)."""
    record = run.checkpoint
    if not isinstance(record, dict) or STEP not in record or not settings.RUN_MAX_TAKEOVERS:
        return False
    return run.owner == RELEASED or crashes(run) < settings.RUN_MAX_TAKEOVERS


def step_of(run: Run) -> int:
    """The model turns the run's last checkpointed step had done (0 before its first)."""
    record = run.checkpoint if isinstance(run.checkpoint, dict) else {}
    step = record.get(STEP)
    if not isinstance(step, dict):
        return 0
    return int(step.get("counters", {}).get("iteration", 0))


def runs_abandoned(*, live_run_ids: set[uuid.UUID], limit: int = 50) -> list[uuid.UUID]:
    """Running runs whose owner is gone: its lease lapsed, or it was a process of this host that
    no longer exists. This process's own runs are live whatever their lease says."""
    now = timezone.now()
    candidates = (
        Run.objects.filter(status=Run.Status.RUNNING)
        .filter(
            Q(lease_expires_at__lt=now) | Q(lease_expires_at=None) | Q(owner__startswith=f"{socket.gethostname()}:")
        )
        .exclude(pk__in=live_run_ids)
        .order_by("lease_expires_at")
        .values_list("pk", "owner", "lease_expires_at")[: limit * 4]
    )
    return [pk for pk, owner, lease in candidates if leases.owner_is_gone(owner, lease, now)][:limit]


def run_release(*, run_id: uuid.UUID, takeovers: int) -> None:
    """This process hands the run over (it drains, on SIGTERM): its lease is let go at once, so the
    sweep of another process takes it over from its last step without waiting for it to lapse. The
    owner becomes ``RELEASED``: the taker counts a hand-over, not a crash (RUN_MAX_TAKEOVERS)."""
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id, status=Run.Status.RUNNING, takeovers=takeovers).first()
        if run is None:
            return
        entry = {"kind": "handover", "at": now.isoformat(), "from": run.owner, "step": step_of(run)}
        run.takeover_history = [*run.takeover_history, entry]
        run.owner = RELEASED
        run.lease_expires_at = now - leases.lease_length()
        run.save(update_fields=["takeover_history", "owner", "lease_expires_at"])


# The CUSTOM event a run taken over shows its clients first (its continuation's log, /connect).
TAKEOVER_EVENT = "threadline.takeover"


def takeover_shown(run: Run) -> dict[str, Any]:
    """The run's last takeover as a client is shown it: ``kind`` ("crash" or "handover"), ``at``
    (when it was taken over), ``from`` and ``by`` (the processes), ``step`` (the model turns done
    before it), ``takeovers`` and ``crashes`` so far."""
    entry = dict(run.takeover_history[-1]) if run.takeover_history else {}
    return {
        "kind": entry.get("kind", "crash"),
        "at": entry.get("takenAt") or entry.get("at", ""),
        "from": entry.get("from", ""),
        "by": entry.get("by", ""),
        "step": entry.get("step", 0),
        "takeovers": run.takeovers,
        "crashes": crashes(run),
    }


def _history_taken(run: Run, now: Any, *, handed: bool) -> list[dict[str, Any]]:
    """The run's takeover history with this process's takeover: the hand-over its draining process
    noted, completed, or a crash."""
    history = [dict(entry) for entry in run.takeover_history]
    by = leases.owner_id()
    if handed and history and history[-1].get("kind") == "handover" and "by" not in history[-1]:
        history[-1].update(by=by, takenAt=now.isoformat())
    else:
        history.append({"kind": "crash", "at": now.isoformat(), "from": run.owner, "by": by, "step": step_of(run)})
    return history


@again_after_a_race
def run_take_over(*, run_id: uuid.UUID) -> TakenOver | None:
    """Claims the running run ``run_id`` if its owner is gone, for this process; None when another
    process was first, the owner lives, or the run cannot go on (then it is healed here)."""
    now = timezone.now()
    with transaction.atomic():
        thread_pk = thread_lock(runs__pk=run_id)  # the thread, then the run (threads/locking.py)
        run = (
            # FOR UPDATE, not NO KEY: it waits for a log write of the run's old owner in flight, whose
            # KEY SHARE lock says the run is still that owner's (threads/eventlog.py ``taken_over``).
            Run.objects.select_for_update(of=("self",))
            .select_related("thread__agent")
            .filter(pk=run_id, status=Run.Status.RUNNING)
            .first()
        )
        if thread_pk is None or run is None or not leases.owner_is_gone(run.owner, run.lease_expires_at, now):
            return None
        thread = run.thread
        if not can_go_on(run) or not thread.agent.enabled:
            gone_for_good = crashes(run) >= settings.RUN_MAX_TAKEOVERS and settings.RUN_MAX_TAKEOVERS > 0
            runs_heal(run_ids=[run.pk], now=now, error=too_many_takeovers(crashes(run)) if gone_for_good else None)
            subagents_interrupt(thread=thread, run_ids=[run.pk], now=now)
            return None
        logged = run_events_after(run=run, after=0)
        if not logged:
            # It died before its log's first write: its RUN_STARTED, which a client may have been
            # shown, is written as it was, and the continuation comes after it.
            started = ev.run_started(thread.agui_thread_id, run.agui_run_id, v1=bool(run.protocol_version))
            insert_events(run.pk, [(1, started["type"], orjson.dumps(started).decode())])
        last = logged[-1].seq if logged else 1
        # The conditional update is the claim, as a waiting run's (threads/waits.py): under the row
        # lock the owner it read is the one it replaces, and of two processes only one changes it.
        handed = run.owner == RELEASED
        claimed = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING, owner=run.owner).update(
            owner=leases.owner_id(),
            lease_expires_at=leases.lease_until(now),
            takeovers=run.takeovers + 1,
            handovers=run.handovers + handed,
            taken_over_at=now,
            takeover_history=_history_taken(run, now, handed=handed),
        )
        if not claimed:
            return None
        run.refresh_from_db()
        # Its sub-agents in flight stopped with it; their delegations fail (orchestrator/takeover.py).
        subagents_interrupt(thread=thread, run_ids=[run.pk], now=now)
        thread.refresh_from_db(fields=["state"])
        session, _ = Session.objects.get_or_create(thread=thread)
        record = run.checkpoint or {}
        return TakenOver(
            run=run,
            thread=thread,
            session=session,
            agent=thread.agent,
            checkpoint=Checkpoint.from_json(record[STEP]),
            client_tools=list(record.get("clientTools", [])),
            user_turn=record.get(USER_TURN),
            logged=[orjson.loads(event.payload) for event in logged if event.type in ev.OPENING_AND_CLOSING_RUNS],
            after=last + UNLOGGED_AHEAD,
            count=len(logged) or 1,
            shown=takeover_shown(run),
        )


__all__ = [
    "INTERRUPTED_ERROR",
    "RELEASED",
    "STEP",
    "TAKEOVER_EVENT",
    "USER_TURN",
    "RunTakenOver",
    "TakenOver",
    "can_go_on",
    "crashes",
    "queued_if_ours",
    "run_release",
    "run_take_over",
    "runs_abandoned",
    "start_record",
    "step_record",
    "still_ours",
    "takeover_shown",
]
