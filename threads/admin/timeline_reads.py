"""The database reads behind a run's timeline page: its segments (the run and the runs that
continued it), their events, approvals and sub-agent tasks, in a fixed number of queries.
What the events become on the page is timeline_fold.py's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from django.db.models import Case, IntegerField, QuerySet, Value, When

from threads.admin.liveness import Liveness
from threads.admin.timeline_fold import Segment, Timeline, TimelineFold
from threads.logframes import events_of
from threads.models import Approval, EventFrame, Run, Session, SubAgentTask
from threads.selectors import run_events_total
from threads.services.runs import OPEN_STATUSES

# Events read for one page: about 1.5 s of work. A longer log shows its beginning and says so;
# the REST API pages through all of it.
EVENT_SCAN_CAP = 100_000


def run_segments(*, run: Run) -> list[Segment]:
    """The run and the Run rows that continued it, in order (one query, whatever their number)."""
    later = Run.objects.filter(thread_id=run.thread_id, parent__isnull=False, started_at__gte=run.started_at)
    child_of: dict[uuid.UUID | None, Run] = {}
    for candidate in later.order_by("-started_at"):
        child_of[candidate.parent_id] = candidate  # the earliest child wins
    chain = [run]
    while (child := child_of.get(chain[-1].pk)) is not None and len(chain) <= len(child_of):
        chain.append(child)
    return [Segment(r, continued=i < len(chain) - 1) for i, r in enumerate(chain)]


def _version(segments: list[Segment], event_count: int, answered: int) -> Liveness:
    tail = segments[-1].run
    fingerprint = "|".join([*(f"{s.run.pk}:{s.status}" for s in segments), str(event_count), str(answered)])
    return Liveness.of(live=tail.status in OPEN_STATUSES, fingerprint=fingerprint)


def run_liveness(*, run: Run) -> Liveness:
    """What the timeline's live refresh polls: three small queries."""
    segments = run_segments(run=run)
    ids = [s.run.pk for s in segments]
    event_count = run_events_total(run_ids=ids)
    answered = Approval.objects.filter(run_id__in=ids).exclude(decision=Approval.Decision.PENDING).count()
    return _version(segments, event_count, answered)


def run_timeline(*, run: Run, event_cap: int = EVENT_SCAN_CAP) -> Timeline:
    """The timeline of ``run`` and of the runs that continued it, from at most ``event_cap`` events,
    built in a fixed number of queries."""
    segments = run_segments(run=run)
    ids = [s.run.pk for s in segments]
    approvals = list(Approval.objects.filter(run_id__in=ids).order_by("requested_at"))
    tasks = {t.tool_call_id: t for t in SubAgentTask.objects.filter(run_id__in=ids)}
    fold = TimelineFold(
        segments=segments,
        approvals={a.tool_call_id: a for a in approvals},
        tasks=tasks,
        failed_calls=_failed_tool_calls(run),
    )
    events_read = fold.read(_events(ids, event_cap))
    event_count = events_read if events_read < event_cap else run_events_total(run_ids=ids)
    fold.attach_orphan_approvals(approvals)
    answered = sum(1 for a in approvals if a.decision != Approval.Decision.PENDING)
    return Timeline(
        run=run,
        previous=run.parent,
        segments=segments,
        entries=fold.entries,
        event_count=event_count,
        events_read=events_read,
        liveness=_version(segments, event_count, answered),
    )


def _events(run_ids: list[uuid.UUID], cap: int) -> Iterator[tuple[int, int, str, str]]:
    """(segment index, seq, type, payload) in timeline order, ``cap`` at most, from one query over
    the segments' frames, read as they come so a long log is never held whole. The index rather
    than the run's key: converting a UUID per row cost more than the rest of the reading."""
    frames: QuerySet[EventFrame] = EventFrame.objects.filter(run_id__in=run_ids)
    if len(run_ids) > 1:
        segment = Case(*(When(run_id=pk, then=i) for i, pk in enumerate(run_ids)), output_field=IntegerField())
        frames = frames.annotate(segment=segment).order_by("segment", "last_seq")
    else:
        frames = frames.annotate(segment=Value(0, output_field=IntegerField())).order_by("last_seq")
    left, current, seen = cap, -1, 0
    for index, first, body in frames.values_list("segment", "first_seq", "body").iterator(chunk_size=50):
        if index != current:
            current, seen = index, 0
        for event in events_of(first, body, after=seen):
            if left <= 0:
                return
            left -= 1
            seen = event.seq
            yield index, event.seq, event.type, event.payload


def _failed_tool_calls(run: Run) -> set[str]:
    """The tool calls whose result was an error. AG-UI's TOOL_CALL_RESULT has no error flag, so
    the log cannot tell; the session's turns (the model's view) keep ``is_error``. Turns that
    compaction summarised are gone, and their calls are shown without the mark."""
    turns = Session.objects.filter(thread_id=run.thread_id).values_list("turns", flat=True).first() or []
    failed: set[str] = set()
    for turn in turns:
        content = turn.get("content") if isinstance(turn, dict) else None
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("is_error"):
                failed.add(str(block.get("tool_use_id", "")))
    return failed
