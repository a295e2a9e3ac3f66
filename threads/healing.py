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
from django.db.models import Max

from threads.models import Run, RunEvent

INTERRUPTED_ERROR = {
    "type": "RUN_ERROR",
    "message": "the server process running this run stopped; send a new message to go on",
    "code": "interrupted",
}
_TERMINAL = ("RUN_FINISHED", "RUN_ERROR")


def _closings(events: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """The END events of what the log left open, innermost first."""
    texts: dict[str, None] = {}
    tools: dict[str, None] = {}
    reasoning: dict[str, None] = {}
    steps: dict[str, None] = {}
    for type_, payload in events:
        if type_ not in _TRACKED:
            continue
        event = orjson.loads(payload)
        if type_ == "TEXT_MESSAGE_START":
            texts[event["messageId"]] = None
        elif type_ == "TEXT_MESSAGE_END":
            texts.pop(event["messageId"], None)
        elif type_ == "TOOL_CALL_START":
            tools[event["toolCallId"]] = None
        elif type_ == "TOOL_CALL_END":
            tools.pop(event["toolCallId"], None)
        elif type_ == "REASONING_START":
            reasoning[event["messageId"]] = None
        elif type_ == "REASONING_END":
            reasoning.pop(event["messageId"], None)
        elif type_ == "STEP_STARTED":
            steps[event["stepName"]] = None
        elif type_ == "STEP_FINISHED":
            steps.pop(event["stepName"], None)
    closings: list[dict[str, Any]] = [{"type": "TEXT_MESSAGE_END", "messageId": m} for m in texts]
    closings += [{"type": "TOOL_CALL_END", "toolCallId": t} for t in tools]
    for message_id in reasoning:
        closings += [
            {"type": "REASONING_MESSAGE_END", "messageId": message_id},
            {"type": "REASONING_END", "messageId": message_id},
        ]
    closings += [{"type": "STEP_FINISHED", "stepName": s} for s in reversed(list(steps))]
    return closings


_TRACKED = frozenset(
    {
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_START",
        "TOOL_CALL_END",
        "REASONING_START",
        "REASONING_END",
        "STEP_STARTED",
        "STEP_FINISHED",
    }
)


def runs_heal(*, run_ids: list[uuid.UUID], now: datetime) -> None:
    """Marks the runs interrupted and ends their logs. Idempotent: a run already ended, or whose log
    already ends with a terminal event, keeps it."""
    for run_id in run_ids:
        with transaction.atomic():
            run = Run.objects.select_for_update(no_key=True).filter(pk=run_id).first()
            if run is None:
                continue
            if run.status == Run.Status.RUNNING:
                run.status, run.outcome, run.finished_at = Run.Status.INTERRUPTED, "interrupted", now
            last = RunEvent.objects.filter(run=run).aggregate(last=Max("seq"))["last"] or 0
            tail = RunEvent.objects.filter(run=run, seq=last).values_list("type", flat=True).first()
            if tail not in _TERMINAL:
                logged = RunEvent.objects.filter(run=run, type__in=_TRACKED).order_by("seq")
                ending = [*_closings(logged.values_list("type", "payload")), INTERRUPTED_ERROR]
                if last == 0:  # it died before its first event was written
                    thread_id = run.thread.agui_thread_id
                    ending.insert(0, {"type": "RUN_STARTED", "threadId": thread_id, "runId": run.agui_run_id})
                RunEvent.objects.bulk_create(
                    [
                        RunEvent(run=run, seq=last + i, type=event["type"], payload=orjson.dumps(event).decode())
                        for i, event in enumerate(ending, 1)
                    ]
                )
                last += len(ending)
            run.event_count = last
            run.save(update_fields=["status", "outcome", "finished_at", "event_count"])
