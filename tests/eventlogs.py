"""A run's event log in tests: read back event by event, and written as the run's writer writes it
(frames of contiguous events), through the project's own reads and writes."""

from __future__ import annotations

from typing import Any

import orjson

from threads.eventlog import insert_events
from threads.logframes import LoggedEvent
from threads.models import Run
from threads.selectors import run_events_after, run_last_seq


def logged(run: Run) -> list[LoggedEvent]:
    """Every event of the run's log, in order."""
    return run_events_after(run=run, after=0)


def log_events(run: Run, events: list[dict[str, Any]], *, per_frame: int = 2000) -> list[LoggedEvent]:
    """Appends ``events`` after what the run's log holds, ``per_frame`` to a frame; returns them as logged."""
    last = run_last_seq(run_ids=[run.pk])
    rows = [(seq, event["type"], orjson.dumps(event).decode()) for seq, event in enumerate(events, last + 1)]
    for start in range(0, len(rows), per_frame):
        insert_events(run.pk, rows[start : start + per_frame])
    return [LoggedEvent(seq, type_, payload) for seq, type_, payload in rows]
