"""Reads of threads, runs, messages and the event log."""

from __future__ import annotations

from typing import Any

from agents.models import Agent
from threads.models import Approval, Message, Run, RunEvent, Thread


def agent_get(*, name: str) -> Agent | None:
    return Agent.objects.filter(name=name, enabled=True).first()


def agent_names() -> list[str]:
    return list(Agent.objects.filter(enabled=True).values_list("name", flat=True))


def thread_get(*, agui_thread_id: str) -> Thread | None:
    return Thread.objects.select_related("agent", "session").filter(agui_thread_id=agui_thread_id).first()


def thread_transcript(*, thread: Thread) -> list[dict[str, Any]]:
    return list(Message.objects.filter(thread=thread).order_by("position").values_list("body", flat=True))


def run_get(*, agui_run_id: str, agui_thread_id: str | None = None) -> Run | None:
    runs = Run.objects.select_related("thread__agent").filter(agui_run_id=agui_run_id)
    if agui_thread_id is not None:
        runs = runs.filter(thread__agui_thread_id=agui_thread_id)
    return runs.order_by("-started_at").first()


def thread_latest_run(*, thread: Thread) -> Run | None:
    return Run.objects.select_related("thread").filter(thread=thread).order_by("-started_at").first()


def run_events_after(*, run: Run, after: int, limit: int | None = None) -> list[RunEvent]:
    events = RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")
    return list(events[:limit] if limit else events)


def approval_get(*, interrupt_id: str) -> Approval | None:
    return Approval.objects.filter(id=interrupt_id).first()
