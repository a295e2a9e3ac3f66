"""Retention of the event logs: the logs of runs that ended long enough ago are removed, while the
runs, their messages in the thread and their approvals stay (manage.py prune_event_logs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from threads.models import EventFrame, Run
from threads.services.runs import OPEN_STATUSES

# Runs per transaction: a long backlog is removed in short transactions, never one that holds the
# log's table while the server streams.
PRUNE_BATCH = 500


@dataclass(frozen=True)
class Pruned:
    runs: int
    frames: int


def runs_with_old_logs(*, ended_before: datetime) -> list[Run]:
    """The ended runs whose log is still kept and that ended before ``ended_before``, oldest first."""
    runs = Run.objects.filter(finished_at__lt=ended_before, events_pruned_at__isnull=True).exclude(
        status__in=OPEN_STATUSES
    )
    return list(runs.order_by("finished_at"))


def event_logs_prune(*, ended_before: datetime, batch: int = PRUNE_BATCH) -> Pruned:
    """Removes the event logs of the runs that ended before ``ended_before`` and marks each run
    pruned, so a reattach is told the log is gone. A run still open (running or waiting) keeps its
    log, however old."""
    runs = frames = 0
    while True:
        with transaction.atomic():
            eligible = Run.objects.filter(finished_at__lt=ended_before, events_pruned_at__isnull=True)
            ids = list(eligible.exclude(status__in=OPEN_STATUSES).values_list("pk", flat=True)[:batch])
            if not ids:
                return Pruned(runs=runs, frames=frames)
            removed, _ = EventFrame.objects.filter(run_id__in=ids).delete()
            Run.objects.filter(pk__in=ids).update(events_pruned_at=timezone.now())
        runs, frames = runs + len(ids), frames + removed
