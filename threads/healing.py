"""Runs whose server process died: marked interrupted, and their event log given its end.

Every replay of every run ends with RUN_FINISHED or RUN_ERROR: a run that died
mid-stream gets what was open closed (in the order the clients require) and a
RUN_ERROR appended to its log, so a reattaching client is never left waiting.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson
from django.db import transaction

from threads.eventlog import UNLOGGED_AHEAD, insert_events
from threads.logframes import LoggedEvent
from threads.models import Run
from threads.selectors import run_events_after
from vocabulary import agui as ev

INTERRUPTED_ERROR = ev.run_error(
    "the server process running this run stopped; send a new message to go on", "interrupted"
)


def _closings(events: Iterable[LoggedEvent]) -> list[dict[str, Any]]:
    """The END events of what the log left open, innermost first (sub-agents' included)."""
    parts = [orjson.loads(payload) for _, type_, payload, _ in events if type_ in ev.OPENING_AND_CLOSING_RUNS]
    return ev.close_log(parts)[0]


def runs_heal(*, run_ids: list[uuid.UUID], now: datetime, error: dict[str, Any] | None = None) -> None:
    """Marks the runs interrupted and ends their logs with ``error`` (a RUN_ERROR; by default
    INTERRUPTED_ERROR). Idempotent: a run already ended, or whose log already ends with a terminal
    event, keeps it."""
    for run_id in run_ids:
        with transaction.atomic():
            # FOR UPDATE: a log write of its owner in flight finishes first (threads/eventlog.py ``taken_over``).
            run = Run.objects.select_for_update().filter(pk=run_id).first()
            if run is None:
                continue
            if run.status == Run.Status.RUNNING:
                run.status, run.outcome, run.finished_at = Run.Status.INTERRUPTED, "interrupted", now
            logged = run_events_after(run=run, after=0)
            count = len(logged)
            if not logged or logged[-1].type not in ev.TERMINAL_TYPES:
                if not logged:
                    # It died before its first write: its RUN_STARTED, the first event of every run
                    # and one a client may have been shown, is written as it was.
                    started = ev.run_started(run.thread.agui_thread_id, run.agui_run_id)
                    insert_events(run.pk, [(1, started["type"], orjson.dumps(started).decode())])
                    count += 1
                ending = [*_closings(logged), error or INTERRUPTED_ERROR]
                # Its process may have streamed up to UNLOGGED_AHEAD events past the log that a client
                # holds: the end comes after them, so a client reattaching from any of them gets it.
                first = (logged[-1].seq if logged else 1) + UNLOGGED_AHEAD + 1
                insert_events(
                    run.pk,
                    [(seq, event["type"], orjson.dumps(event).decode()) for seq, event in enumerate(ending, first)],
                )
                count += len(ending)
            run.event_count = count
            run.save(update_fields=["status", "outcome", "finished_at", "event_count"])
