"""Reads of threads, runs, messages and the event log.

The ``*_visible`` and list selectors below serve the REST API: each takes the
user asking and returns only what that user may see (staff: everything; anyone
else: their own threads and what hangs under them), with the joins its output
needs so a list costs the same few queries whatever its length.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Count, F, IntegerField, Max, Model, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from rest_framework.authtoken.models import Token

from agents.models import Agent, DailySpend, PermissionRule
from threads import fastsql, leases
from threads.jsonlimits import MAX_JSON_DEPTH, clip_depth
from threads.logframes import LoggedEvent, events_of
from threads.models import Approval, Attachment, EventFrame, Message, Run, SubAgentTask, Thread

# The largest primary key a database integer holds; SQLite raises on a larger lookup rather than finding nothing.
_MAX_INT_KEY = 2**63 - 1


def agent_get(*, name: str) -> Agent | None:
    """The enabled agent named ``name`` (names are unique). Read on every run's way to its first
    byte, twice: by fastsql, not the ORM (threads/fastsql.py ``first``)."""
    return fastsql.first(Agent, name=name, enabled=True)


def thread_get(*, agui_thread_id: str) -> Thread | None:
    return Thread.objects.select_related("agent", "session").filter(agui_thread_id=agui_thread_id).first()


def thread_transcript(*, thread: Thread) -> list[dict[str, Any]]:
    # By key, so a thread not yet stored (a hydrate of a new thread id) simply has no messages.
    bodies = Message.objects.filter(thread_id=thread.pk).order_by("position").values_list("body", flat=True)
    # A message stored before input depth was limited is cut, so the snapshot carrying it still encodes.
    return [clip_depth(body, MAX_JSON_DEPTH - 2) for body in bodies]


def api_token_user_id(*, key: str) -> int | None:
    """The id of the active user whose API (DRF) token ``key`` is, or None."""
    found = Token.objects.filter(key=key, user__is_active=True).values_list("user_id", flat=True).first()
    return None if found is None else int(found)


def session_user_id(*, session_key: str) -> int | None:
    """The id of the active user signed in with the Django session ``session_key`` (Django's own
    login views made it), or None. Django's ``get_user`` checks the session's backend and its
    password hash, so a session outlived by a password change or a deactivation is refused."""
    request = HttpRequest()
    request.session = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(request)
    return int(user.pk) if user.is_authenticated and user.is_active else None


def thread_reachable(*, agui_thread_id: str, user_id: int) -> bool:
    """Whether the user may use this AG-UI thread: theirs, or not started yet (it will be theirs)."""
    owners = list(Thread.objects.filter(agui_thread_id=agui_thread_id).values_list("owner_id", flat=True)[:1])
    return not owners or owners[0] == user_id


def run_get(*, agui_run_id: str, agui_thread_id: str | None = None) -> Run | None:
    runs = Run.objects.select_related("thread__agent").filter(agui_run_id=agui_run_id)
    if agui_thread_id is not None:
        runs = runs.filter(thread__agui_thread_id=agui_thread_id)
    return runs.order_by("-started_at").first()


def run_by_pk(*, run_pk: uuid.UUID) -> Run | None:
    return Run.objects.select_related("thread__agent").filter(pk=run_pk).first()


def thread_latest_run(*, thread: Thread) -> Run | None:
    return Run.objects.select_related("thread").filter(thread=thread).order_by("-started_at").first()


@dataclass(slots=True, frozen=True)
class OpenRun:
    """The thread's run that is not over: running somewhere, or waiting for answers."""

    pk: uuid.UUID
    status: str
    held: bool  # running, and its process still holds it


def thread_open_run(*, agui_thread_id: str) -> OpenRun | None:
    row = (
        Run.objects.filter(thread__agui_thread_id=agui_thread_id, status__in=(Run.Status.RUNNING, Run.Status.WAITING))
        .order_by("-started_at")
        .values_list("pk", "status", "owner", "lease_expires_at")
        .first()
    )
    if row is None:
        return None
    pk, status, owner, lease = row
    return OpenRun(pk=pk, status=status, held=status == Run.Status.RUNNING and not leases.owner_is_gone(owner, lease))


def run_events_after(*, run: Run | uuid.UUID, after: int, limit: int | None = None) -> list[LoggedEvent]:
    """The run's logged events with a seq above ``after``, in order: all of them, or the first
    ``limit`` and perhaps a few more (whole frames are read; a caller pages on from the last seq)."""
    frames = EventFrame.objects.filter(run=run, last_seq__gt=after).order_by("last_seq")
    events: list[LoggedEvent] = []
    for first, body, created in frames.values_list("first_seq", "body", "created_at").iterator(chunk_size=50):
        # A frame overlapping what is already read (a dead owner's late write after its run was
        # healed) adds only what comes after: the first frame written for a seq wins.
        events.extend(events_of(first, body, after=events[-1].seq if events else after, created_at=created))
        if limit and len(events) >= limit:
            break
    return events


def run_events_in(*, run: Run | uuid.UUID, first: int, last: int) -> list[LoggedEvent]:
    """The run's logged events with ``first <= seq <= last``, in order."""
    return [event for event in run_events_after(run=run, after=first - 1, limit=last - first + 1) if event.seq <= last]


def run_last_seq(*, run_ids: list[uuid.UUID]) -> int:
    """The highest seq logged for any of the runs (0 when nothing is)."""
    return EventFrame.objects.filter(run_id__in=run_ids).aggregate(last=Max("last_seq"))["last"] or 0


def run_last_event(*, run: Run | uuid.UUID) -> LoggedEvent | None:
    """The last event of the run's log, reading only its last frame."""
    frames = EventFrame.objects.filter(run=run).order_by("-last_seq")
    frame = frames.values_list("first_seq", "last_seq", "body", "created_at").first()
    if frame is None:
        return None
    first, last, body, created = frame
    return events_of(first, body, after=last - 1, created_at=created)[-1]


def run_events_total(*, run_ids: list[uuid.UUID]) -> int:
    """How many events the runs' logs hold: one query over their frames, whatever the events' number."""
    frames = EventFrame.objects.filter(run_id__in=run_ids)
    spans = frames.aggregate(events=Sum(F("last_seq") - F("first_seq") + 1))["events"]
    return int(spans or 0)


class RunEventPages:
    """A run's events after ``after`` as a sequence the REST API's paginator slices: item ``i``
    is the event with seq ``after + 1 + i``, and a page reads only the frames it needs."""

    def __init__(self, run: Run, after: int) -> None:
        self.run, self.after = run, after
        self._count: int | None = None

    def count(self) -> int:
        if self._count is None:
            self._count = max(0, run_last_seq(run_ids=[self.run.pk]) - self.after)
        return self._count

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, index: slice) -> list[LoggedEvent]:
        start, stop, _ = index.indices(self.count())
        if stop <= start:
            return []
        return run_events_in(run=self.run, first=self.after + 1 + start, last=self.after + stop)


def agents_enabled() -> list[Agent]:
    return list(Agent.objects.filter(enabled=True).order_by("name"))


def _is_staff(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(getattr(user, "is_staff", False))


def threads_visible(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Thread]:
    if _is_staff(user):
        return Thread.objects.all()
    return Thread.objects.filter(owner_id=user.pk)


def count_of(model: type[Model], fk: str = "thread") -> Coalesce:
    """The number of ``model`` rows whose ``fk`` points at the outer row: a correlated subquery, so
    two counts do not multiply each other as two joins would."""
    rows = model._default_manager.filter(**{fk: OuterRef("pk")}).order_by().values(fk)
    return Coalesce(Subquery(rows.annotate(n=Count("pk")).values("n")), 0, output_field=IntegerField())


def _with_counts(threads: QuerySet[Thread]) -> QuerySet[Thread]:
    # Correlated counts rather than Count() over two joins, which would multiply messages by runs.
    return threads.select_related("agent", "owner").annotate(message_count=count_of(Message), run_count=count_of(Run))


THREAD_LIST_LEAVES_OUT = ("state", "agent__mcp_servers", "agent__system_prompt", "agent__description")


def thread_list(
    *,
    user: AbstractBaseUser | AnonymousUser,
    agent: str | None = None,
    owner: str | None = None,
    updated_since: datetime | None = None,
) -> QuerySet[Thread]:
    """Threads the user may see, most recently updated first (the id breaks ties, so pages are stable).

    ``owner`` is a username or a user id; ``agent`` an agent's name.
    """
    # Nor what a list does not show: a thread's state document can run to megabytes.
    threads = _with_counts(threads_visible(user=user)).defer(*THREAD_LIST_LEAVES_OUT)
    if agent:
        threads = threads.filter(agent__name=agent)
    if owner:
        by_owner = Q(owner__username=owner)
        if owner.isdigit() and int(owner) <= _MAX_INT_KEY:
            by_owner |= Q(owner_id=int(owner))
        threads = threads.filter(by_owner)
    if updated_since is not None:
        threads = threads.filter(updated_at__gte=updated_since)
    return threads.order_by("-updated_at", "-id")


def thread_get_visible(*, user: AbstractBaseUser | AnonymousUser, agui_thread_id: str) -> Thread | None:
    return threads_visible(user=user).select_related("agent", "owner").filter(agui_thread_id=agui_thread_id).first()


def thread_detail(*, user: AbstractBaseUser | AnonymousUser, agui_thread_id: str) -> Thread | None:
    """The thread with its counts and its transcript prefetched (``thread.messages.all()`` in position order)."""
    transcript = Prefetch("messages", queryset=Message.objects.order_by("position").only("thread", "body"))
    return (
        _with_counts(threads_visible(user=user))
        .prefetch_related(transcript)
        .filter(agui_thread_id=agui_thread_id)
        .first()
    )


@dataclass(slots=True, frozen=True)
class ThreadPage:
    threads: Sequence[Thread]  # each with ``last_run_at``, the start of its latest run (None before one)
    more: bool  # threads follow the last of these


def thread_page(
    *,
    owner_id: int | None,
    agent: str | None,
    include_archived: bool,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> ThreadPage:
    """One user's threads (``owner_id`` None: the threads nobody owns, the shared token's), newest
    activity first, the ``limit`` after ``after`` (the last of the page before: its activity time
    and id, which break ties so pages neither skip nor repeat a thread)."""
    threads = Thread.objects.filter(owner_id=owner_id) if owner_id is not None else Thread.objects.filter(owner=None)
    if agent:
        threads = threads.filter(agent__name=agent)
    if not include_archived:
        threads = threads.filter(archived=False)
    if after is not None:
        updated, pk = after
        threads = threads.filter(Q(updated_at__lt=updated) | Q(updated_at=updated, id__lt=pk))
    latest = Run.objects.filter(thread=OuterRef("pk")).order_by("-started_at").values("started_at")[:1]
    rows = list(
        threads.select_related("agent")
        .defer(*THREAD_LIST_LEAVES_OUT)
        .annotate(last_run_at=Subquery(latest))
        .order_by("-updated_at", "-id")[: limit + 1]
    )
    return ThreadPage(threads=rows[:limit], more=len(rows) > limit)


def thread_events(*, thread: Thread) -> list[LoggedEvent]:
    """The AG-UI events of every run of the thread, run after run in the order they started."""
    events: list[LoggedEvent] = []
    for run in Run.objects.filter(thread=thread).order_by("started_at").values_list("pk", flat=True):
        events += run_events_after(run=run, after=0)
    return events


def attachments_of(*, ids: Collection[uuid.UUID], owner_id: int | None) -> dict[uuid.UUID, Attachment]:
    """The owner's uploaded files among ``ids`` (None: the shared token's), by id."""
    found = (
        Attachment.objects.filter(pk__in=ids, owner_id=owner_id)
        if owner_id is not None
        else (Attachment.objects.filter(pk__in=ids, owner=None))
    )
    return {attachment.pk: attachment for attachment in found}


def run_list(*, thread: Thread) -> QuerySet[Run]:
    """A thread's runs, newest first."""
    return Run.objects.select_related("thread").filter(thread=thread).order_by("-started_at", "-id")


def run_get_visible(*, user: AbstractBaseUser | AnonymousUser, run_id: uuid.UUID) -> Run | None:
    runs = Run.objects.select_related("thread")
    if not _is_staff(user):
        runs = runs.filter(thread__owner_id=user.pk)
    return runs.filter(pk=run_id).first()


def run_event_list(*, run: Run, after: int = 0) -> RunEventPages:
    """The run's events with a sequence number above ``after``, in order (seq starts at 1)."""
    return RunEventPages(run, after)


def _approvals_visible(user: AbstractBaseUser | AnonymousUser) -> QuerySet[Approval]:
    approvals = Approval.objects.select_related("run__thread")
    if _is_staff(user):
        return approvals
    return approvals.filter(run__thread__owner_id=user.pk)


def approval_list(
    *, user: AbstractBaseUser | AnonymousUser, pending: bool = False, agui_thread_id: str | None = None
) -> QuerySet[Approval]:
    """Approvals the user may see, newest first."""
    approvals = _approvals_visible(user)
    if pending:
        approvals = approvals.filter(decision=Approval.Decision.PENDING)
    if agui_thread_id:
        approvals = approvals.filter(run__thread__agui_thread_id=agui_thread_id)
    return approvals.order_by("-requested_at", "-id")


def approval_get_visible(*, user: AbstractBaseUser | AnonymousUser, approval_id: str) -> Approval | None:
    return _approvals_visible(user).filter(pk=approval_id).first()


def _subagent_tasks_visible(user: AbstractBaseUser | AnonymousUser) -> QuerySet[SubAgentTask]:
    tasks = SubAgentTask.objects.select_related("thread", "run")
    if _is_staff(user):
        return tasks
    return tasks.filter(thread__owner_id=user.pk)


def subagent_task_list(*, user: AbstractBaseUser | AnonymousUser, status: str | None = None) -> QuerySet[SubAgentTask]:
    """Sub-agent tasks the user may see, newest first."""
    tasks = _subagent_tasks_visible(user)
    if status:
        tasks = tasks.filter(status=status)
    return tasks.order_by("-started_at", "id")


def thread_subagent_tasks(*, thread: Thread) -> QuerySet[SubAgentTask]:
    """A thread's sub-agent board: its tasks in the order they started."""
    return SubAgentTask.objects.select_related("thread", "run").filter(thread=thread).order_by("started_at", "id")


def subagent_task_get_visible(*, user: AbstractBaseUser | AnonymousUser, task_id: str) -> SubAgentTask | None:
    return _subagent_tasks_visible(user).filter(pk=task_id).first()


def agent_list() -> QuerySet[Agent]:
    """Every agent, enabled or not, by name."""
    return Agent.objects.order_by("name")


def agent_get_by_name(*, name: str) -> Agent | None:
    return Agent.objects.filter(name=name).first()


def _permission_rules_visible(user: AbstractBaseUser | AnonymousUser) -> QuerySet[PermissionRule]:
    rules = PermissionRule.objects.select_related("agent")
    if _is_staff(user):
        return rules
    # A rule scoped to a thread names the thread: only its owner sees it, so thread ids do not leak.
    own_threads = Thread.objects.filter(owner_id=user.pk).values("agui_thread_id")
    return rules.filter(~Q(scope=PermissionRule.Scope.THREAD) | Q(thread_agui_id__in=own_threads))


def permission_rule_list(
    *, user: AbstractBaseUser | AnonymousUser, scope: str | None = None, agent: str | None = None
) -> QuerySet[PermissionRule]:
    """The rules the user may see in the order they are tried (position, then id)."""
    rules = _permission_rules_visible(user)
    if scope:
        rules = rules.filter(scope=scope)
    if agent:
        rules = rules.filter(agent__name=agent)
    return rules.order_by("position", "id")


def permission_rule_get_visible(*, user: AbstractBaseUser | AnonymousUser, rule_id: int) -> PermissionRule | None:
    if not 0 < rule_id <= _MAX_INT_KEY:
        return None
    return _permission_rules_visible(user).filter(pk=rule_id).first()


# -- spend (agents/spending.py keeps it per UTC day) -----------------------------------------------


def spend_per_user_day(
    *,
    user: AbstractBaseUser | AnonymousUser,
    since: date | None = None,
    until: date | None = None,
    agent: str = "",
    username: str = "",
) -> QuerySet[Any, Any]:
    """What each user spent each UTC day (every agent together, or ``agent``'s), newest day first:
    staff see everyone's (the shared token's as the user null), a user only their own. Summed from
    the per-day rows runs keep (agents/spending.py), through the (user, day) and (day) indexes."""
    rows = DailySpend.objects.all()
    if not _is_staff(user):
        rows = rows.filter(Q(user_id=user.pk))
    elif username:
        rows = rows.filter(user__username=username)
    if since is not None:
        rows = rows.filter(day__gte=since)
    if until is not None:
        rows = rows.filter(day__lte=until)
    if agent:
        rows = rows.filter(agent__name=agent)
    return (
        rows.values("day", "user_id", "user__username")
        .annotate(
            cost_usd=Sum("cost_usd"),
            calls=Sum("calls"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
        )
        .order_by("-day", "user_id")
    )
