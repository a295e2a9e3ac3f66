"""Waiting runs in the database: a run that waits, its answers, and the one process that goes on.

A waiting run is a Run row in status WAITING with its checkpoint (orchestrator/waits.py).
Nothing in any process waits on it. Answers are written first (the first answer
wins: every write is conditional on the answer still being open), then exactly
one process claims the run with a conditional update of its status, and goes on
from the checkpoint in a new Run row, the waiting run's child.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from agents.metrics import record_approval, record_elicitation
from agents.models import Agent
from agents.permissions import memory_key
from orchestrator.approvals import Answer
from orchestrator.waits import Checkpoint, OpenCall, WaitKind
from threads import leases
from threads.locking import again_after_a_race, thread_lock
from threads.models import Approval, Run, Session, Thread
from threads.services.approvals import session_remember_approval
from threads.services.tallies import tally_on_commit
from threads.takeover import RunTakenOver


@dataclass(slots=True, frozen=True)
class Decided:
    """A person's answer to one interrupt. For a question, ``text`` is the reply."""

    decision: str  # an Approval.Decision
    reason: str = ""
    always: bool = False
    text: str = ""


@dataclass(slots=True, frozen=True)
class ClientResult:
    """What the client sent for one of its own tools (an AG-UI ``tool`` message): ``error`` set
    when the tool failed there."""

    message_id: str
    content: str
    error: str = ""


@dataclass(slots=True)
class Claimed:
    """This process won the waiting run: ``run`` is the new Run row it goes on in."""

    run: Run
    previous: Run
    thread: Thread
    session: Session
    agent: Agent
    checkpoint: Checkpoint
    answers: dict[str, Answer]
    client_tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class Missing:
    """The request left open calls unanswered; nothing was written."""

    answer_ids: list[str]


@dataclass(slots=True, frozen=True)
class NotWaiting:
    """Nothing on the thread waits (any more): the answer came late, or another was first."""


def _expires(call: OpenCall) -> datetime:
    parsed = parse_datetime(call.expires_at) if call.expires_at else None
    return parsed or timezone.now()


def waiting_checkpoint(run: Run) -> Checkpoint:
    return Checkpoint.from_json((run.checkpoint or {}).get("loop", {}))


@again_after_a_race
def run_wait(
    *,
    run_id: uuid.UUID,
    checkpoint: Checkpoint,
    client_tools: list[dict[str, Any]],
    event_count: int,
    state: dict[str, Any],
    takeovers: int = 0,
) -> None:
    """The run ends as waiting: its checkpoint, and an Approval row for each question a person
    must answer, are written together, so an answer can never find one without the other. Raises
    RunTakenOver, writing nothing, when another process took the run over since this one had it."""
    needed = checkpoint.answers_needed()
    with transaction.atomic():
        thread_lock(runs__pk=run_id)  # the thread first (threads/locking.py): its state is written below
        run = Run.objects.select_for_update(no_key=True).get(pk=run_id)
        if run.takeovers != takeovers:
            raise RunTakenOver(f"run {run_id} was taken over by another process")
        Approval.objects.bulk_create(
            [
                Approval(
                    id=call.answer_id,
                    run=run,
                    tool_call_id=call.call_id,
                    tool=call.name,
                    arguments=call.arguments,
                    message=call.message,
                    expires_at=_expires(call),
                    elicitation=elicitation_shown(call.input) if call.kind is WaitKind.INPUT else None,
                )
                for call in needed
                if call.kind in (WaitKind.APPROVAL, WaitKind.QUESTION, WaitKind.INPUT)
            ]
        )
        now = timezone.now()
        run.status = Run.Status.WAITING
        run.outcome = "interrupt"
        run.checkpoint = {"loop": checkpoint.to_json(), "clientTools": client_tools}
        run.client_answers = {}
        run.wait_deadline = min((_expires(call) for call in needed), default=now)
        run.event_count = event_count
        run.finished_at = now
        run.owner = ""
        run.lease_expires_at = None
        run.save(
            update_fields=[
                "status",
                "outcome",
                "checkpoint",
                "client_answers",
                "wait_deadline",
                "event_count",
                "finished_at",
                "owner",
                "lease_expires_at",
            ]
        )
        Thread.objects.filter(pk=run.thread_id).update(state=state, updated_at=now)


def elicitation_shown(request: dict[str, Any]) -> dict[str, Any]:
    """What an elicitation's row keeps of it: what the person is shown and what checks the answer
    (not the answers given before it nor the server's opaque state: those stay in the checkpoint)."""
    return {key: request.get(key) for key in ("server", "tool", "mode", "message", "schema", "url", "domain")}


def _answer_of(approval: Approval, question: bool) -> Answer:
    decision = approval.decision
    by = approval.answered_by
    if decision == Approval.Decision.APPROVED:
        if question:
            return Answer(approved=True, text=approval.reason, reason=approval.reason, answered_by=by)
        return Answer(approved=True, reason=approval.reason, always=approval.always, answered_by=by)
    if decision == Approval.Decision.TIMEOUT:
        return Answer(approved=False, timed_out=True)
    if decision == Approval.Decision.SUPERSEDED:
        return Answer(approved=False, superseded=True, reason=approval.reason)
    if decision == Approval.Decision.CANCELLED:
        return Answer(approved=False, reason=approval.reason or "cancelled by the user", answered_by=by, cancelled=True)
    return Answer(approved=False, reason=approval.reason, answered_by=by)


def _collect(run: Run, *, now: datetime, expire: bool, supersede: str | None = None) -> dict[str, Answer] | None:
    """The answers of every open call of ``run``, or None while one still waits. With ``expire``,
    calls past their deadline are closed as timed out (recorded); with ``supersede`` (the user's
    new message), every call still open is closed as superseded."""
    needed = waiting_checkpoint(run).answers_needed()
    approvals = {a.id: a for a in Approval.objects.filter(run=run, id__in=[c.answer_id for c in needed])}
    answers: dict[str, Answer] = {}
    for call in needed:
        late = expire and _expires(call) <= now
        if call.kind is WaitKind.CLIENT:
            given = run.client_answers.get(call.answer_id)
            if given is not None:
                answers[call.answer_id] = Answer(
                    approved=True, text=given["content"], message_id=given["messageId"], error=given.get("error", "")
                )
            elif late:
                answers[call.answer_id] = Answer(approved=False, timed_out=True)
            elif supersede is not None:
                answers[call.answer_id] = Answer(approved=False, superseded=True)
            else:
                return None
            continue
        approval = approvals.get(call.answer_id)
        if approval is None:  # never recorded (an older server's run): nobody can answer it
            answers[call.answer_id] = Answer(approved=False, timed_out=True)
            continue
        if approval.decision == Approval.Decision.PENDING:
            if late:  # its deadline came first, whatever closes it now
                closing, reason = Approval.Decision.TIMEOUT, ""
            elif supersede is not None:
                closing, reason = Approval.Decision.SUPERSEDED, supersede
            else:
                return None
            _close(approval, closing, reason, now)
        answers[call.answer_id] = _answer_of(approval, call.kind in (WaitKind.QUESTION, WaitKind.INPUT))
    return answers


def _close(approval: Approval, decision: str, reason: str, now: datetime) -> None:
    if Approval.objects.filter(pk=approval.pk, decision=Approval.Decision.PENDING).update(
        decision=decision, reason=reason, answered_at=now
    ):
        approval.decision, approval.reason, approval.answered_at = decision, reason, now
        tally_on_commit([(decision, approval.requested_at)], now)
    else:
        approval.refresh_from_db()


@dataclass(slots=True, frozen=True)
class ClaimAs:
    """The new Run row the claiming process goes on in."""

    run_pk: uuid.UUID
    agui_run_id: str
    protocol_version: str


def _claim(run: Run, answers: dict[str, Answer], claim: ClaimAs) -> Claimed | NotWaiting:
    # The conditional update is the claim: of two processes, one changes the row, the other none.
    if not Run.objects.filter(pk=run.pk, status=Run.Status.WAITING).update(
        status=Run.Status.SUCCEEDED, wait_deadline=None
    ):
        return NotWaiting()
    new = Run.objects.create(
        id=claim.run_pk,
        thread_id=run.thread_id,
        parent=run,
        agui_run_id=claim.agui_run_id,
        protocol_version=claim.protocol_version,
        owner=leases.owner_id(),
        lease_expires_at=leases.lease_until(),
    )
    thread = Thread.objects.select_related("agent").get(pk=run.thread_id)
    session, _ = Session.objects.get_or_create(thread=thread)
    return Claimed(
        run=new,
        previous=run,
        thread=thread,
        session=session,
        agent=thread.agent,
        checkpoint=waiting_checkpoint(run),
        answers=answers,
        client_tools=list((run.checkpoint or {}).get("clientTools", [])),
    )


def _waiting_run(*, agui_thread_id: str) -> Run | None:
    """The thread's waiting run, locked, after the thread's row (threads/locking.py): a new message
    on the thread (``run_open``) locks them in that order, and so does every answer."""
    if thread_lock(agui_thread_id=agui_thread_id) is None:
        return None
    return (
        Run.objects.select_for_update(of=("self",), no_key=True)
        .filter(thread__agui_thread_id=agui_thread_id, status=Run.Status.WAITING)
        .order_by("-started_at")
        .first()
    )


@dataclass(slots=True)
class _Recorded:
    """What ``_record`` wrote: how many answers, and the "yes, always" keys the session is to keep."""

    count: int = 0
    always: list[str] = field(default_factory=list)

    def remember(self, run: Run) -> None:
        # A "yes, always" is kept for the session at once, whoever goes on with the run; the
        # session's row is the last a writer locks (threads/locking.py), so after every approval.
        for key in self.always:
            session_remember_approval(thread_id=run.thread_id, key=key)


def _record(
    run: Run, interrupt_id: str, decided: Decided, answered_by: str, now: datetime, recorded: _Recorded
) -> None:
    """Writes one answer unless the interrupt already has one (the first answer wins)."""
    approval = Approval.objects.filter(pk=interrupt_id, run=run).first()
    if approval is None:
        return
    stored = decided.text if decided.text else decided.reason
    updated = Approval.objects.filter(pk=interrupt_id, decision=Approval.Decision.PENDING).update(
        decision=decided.decision, reason=stored, always=decided.always, answered_by=answered_by, answered_at=now
    )
    if updated:
        recorded.count += 1
        tally_on_commit([(decided.decision, approval.requested_at)], now)
        if decided.always and decided.decision == Approval.Decision.APPROVED:
            recorded.always.append(memory_key(approval.tool, approval.arguments))


@again_after_a_race
def wait_answer(
    *,
    agui_thread_id: str,
    decisions: dict[str, Decided],
    client_results: dict[str, ClientResult],
    answered_by: str,
    claim: ClaimAs,
) -> Claimed | Missing | NotWaiting:
    """The answers a client's request carries (AG-UI ``resume`` entries, trailing ``tool``
    messages), then the claim. Every open call must be answered, by this request or before it,
    or nothing is written. Answers past their deadline count as timed out."""
    now = timezone.now()
    with transaction.atomic():
        run = _waiting_run(agui_thread_id=agui_thread_id)
        if run is None:
            return NotWaiting()
        needed = waiting_checkpoint(run).answers_needed()
        pending = set(Approval.objects.filter(run=run, decision=Approval.Decision.PENDING).values_list("id", flat=True))
        given = {*decisions, *client_results, *run.client_answers}
        missing = [
            call.answer_id
            for call in needed
            if call.answer_id not in given and (call.kind is WaitKind.CLIENT or call.answer_id in pending)
        ]
        if missing:
            return Missing(missing)
        recorded = _Recorded()
        for call in needed:
            if call.kind is WaitKind.CLIENT:
                if call.answer_id in client_results and call.answer_id not in run.client_answers:
                    result = client_results[call.answer_id]
                    stored = {"messageId": result.message_id, "content": result.content}
                    run.client_answers[call.answer_id] = stored | ({"error": result.error} if result.error else {})
            elif call.answer_id in decisions and _expires(call) > now:
                _record(run, call.answer_id, decisions[call.answer_id], answered_by, now, recorded)
        Run.objects.filter(pk=run.pk).update(client_answers=run.client_answers)
        answers = _collect(run, now=now, expire=True)
        recorded.remember(run)
        if answers is None:  # cannot be: every call was answered or is past its deadline
            return Missing([c.answer_id for c in needed])
        return _claim(run, answers, claim)


@again_after_a_race
def wait_answer_for_operator(
    *, interrupt_id: str, decision: str, reason: str = "", always: bool = False, answered_by: str
) -> bool:
    """An answer from the admin or the REST API; False when the interrupt already had one.
    Once every open call of the run is answered, the run is due: the next sweep of any server
    process goes on with it (nothing here waits for that)."""
    now = timezone.now()
    with transaction.atomic():
        approval = Approval.objects.select_related("run").filter(pk=interrupt_id).first()
        if approval is None:
            return False
        thread_lock(pk=approval.run.thread_id)  # the thread, then the run (threads/locking.py)
        run = Run.objects.select_for_update(no_key=True).get(pk=approval.run_id)
        abandoned = run.status != Run.Status.WAITING and approval.decision == Approval.Decision.PENDING
        if abandoned:
            # Its run ended without it (cancelled, superseded): close it rather than answer into the void.
            _close(approval, Approval.Decision.CANCELLED, ABANDONED, now)
        elif run.status != Run.Status.WAITING:
            return False
        else:
            recorded = _Recorded()
            _record(run, interrupt_id, Decided(decision, reason, always), answered_by, now, recorded)
            if recorded.count and _collect(run, now=now, expire=False) is not None:
                Run.objects.filter(pk=run.pk, status=Run.Status.WAITING).update(wait_deadline=now)
            recorded.remember(run)
            return bool(recorded.count)
    raise ApprovalAbandoned(ABANDONED)


class ApprovalAbandoned(Exception):
    """The run that asked has ended without the answer (cancelled, or superseded by a new
    message): nobody would read it. The approval is recorded as cancelled."""


ABANDONED = "the run that asked has ended: it no longer waits for this answer"


@again_after_a_race
def wait_claim_due(*, run_id: uuid.UUID, run_pk: uuid.UUID) -> Claimed | None:
    """The sweep: a waiting run whose deadline has come, or that has every answer, goes on here
    (answers past their deadline are recorded as timed out), unless another process was first."""
    now = timezone.now()
    with transaction.atomic():
        thread_lock(runs__pk=run_id)  # the thread, then the run (threads/locking.py)
        run = Run.objects.select_for_update(no_key=True).filter(pk=run_id, status=Run.Status.WAITING).first()
        if run is None:
            return None
        answers = _collect(run, now=now, expire=True)
        if answers is None:
            # Not every call is answered yet: look again at the next deadline.
            needed = waiting_checkpoint(run).answers_needed()
            Run.objects.filter(pk=run.pk).update(wait_deadline=min((_expires(c) for c in needed), default=now))
            return None
        claimed = _claim(run, answers, ClaimAs(run_pk, f"{run.agui_run_id}-continued", run.protocol_version))
        return claimed if isinstance(claimed, Claimed) else None


def waiting_runs_due(*, limit: int = 50) -> list[uuid.UUID]:
    return list(
        Run.objects.filter(status=Run.Status.WAITING, wait_deadline__lte=timezone.now())
        .order_by("wait_deadline")
        .values_list("id", flat=True)[:limit]
    )


def wait_supersede(run: Run, *, message: str, now: datetime) -> tuple[Checkpoint, dict[str, Answer]] | None:
    """Inside ``run_open``: a new message on a waiting thread closes its open calls as superseded
    and takes the run over. Returns the checkpoint and its answers, or None if another process
    claimed the run first."""
    answers = _collect(run, now=now, expire=True, supersede=message[:500] or "the user wrote a new message")
    if answers is None or not Run.objects.filter(pk=run.pk, status=Run.Status.WAITING).update(
        status=Run.Status.SUCCEEDED, wait_deadline=None
    ):
        return None
    return waiting_checkpoint(run), answers


@again_after_a_race
def wait_cancel(*, run_id: uuid.UUID) -> bool:
    """A cancel of a waiting run: it ends here, and its questions with it."""
    now = timezone.now()
    reason = "the run was cancelled"
    with transaction.atomic():
        if not Run.objects.filter(pk=run_id, status=Run.Status.WAITING).update(
            status=Run.Status.CANCELLED, outcome="cancelled", wait_deadline=None
        ):
            return False
        pending = Approval.objects.select_for_update().filter(run_id=run_id, decision=Approval.Decision.PENDING)
        closed = list(pending.values_list("tool", "requested_at", "elicitation"))
        pending.update(decision=Approval.Decision.CANCELLED, reason=reason, answered_at=now)
        tally_on_commit([(Approval.Decision.CANCELLED, asked) for _, asked, _ in closed], now)
    # No run goes on from a cancelled one, so its questions are counted here, once.
    cancelled = Answer(approved=False, cancelled=True, reason=reason)
    for tool, requested_at, elicitation in closed:
        if elicitation is not None:
            record_elicitation(str(elicitation.get("server", "")), cancelled)
        else:
            record_approval(tool, cancelled, (now - requested_at).total_seconds())
    return True
