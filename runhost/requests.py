"""What the run host is asked to do by a request (agui/views.py decodes it), and what it answers of
a thread."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agents.runtime import chat_scenario
from orchestrator.request import RunRequest
from threads.queue import HandOver
from threads.waits import ClientResult, Decided


class ThreadStatus(StrEnum):
    IDLE = "idle"
    RUNNING = "running"  # a run works on it, in this process or another
    WAITING = "waiting"  # its run waits for answers; no process holds it


@dataclass(slots=True, frozen=True)
class Start:
    """A request that brings a message (or none: then it is a hydrate)."""

    agent_name: str
    agui_thread_id: str
    agui_run_id: str
    protocol_version: str
    message: dict[str, Any] | None
    request: RunRequest
    client_tools: list[dict[str, Any]] = field(default_factory=list)
    owner_id: int | None = None  # the user whose own token sent it (run_open keeps others out)
    from_queue: Any = None  # the queued message (threads/queue.py) this run starts with


@dataclass(slots=True, frozen=True)
class Answers:
    """A request that answers what the thread's run waits for."""

    agent_name: str
    agui_thread_id: str
    agui_run_id: str
    protocol_version: str
    decisions: dict[str, Decided]
    client_results: dict[str, ClientResult]  # by call id
    answered_by: str
    request: RunRequest
    client_tools: list[dict[str, Any]] = field(default_factory=list)


def start_of_queued(nxt: HandOver, agui_thread_id: str) -> Start:
    """The start of the run that takes a thread's oldest queued message."""
    request = RunRequest(
        request_id=nxt.agui_run_id,
        text="",
        content=nxt.content,
        user_id="" if nxt.owner_id is None else str(nxt.owner_id),
        scenario=chat_scenario(),
    )
    return Start(
        agent_name=nxt.agent_name,
        agui_thread_id=agui_thread_id,
        agui_run_id=nxt.agui_run_id,
        protocol_version=nxt.protocol_version,
        message=nxt.message,
        request=request,
        client_tools=nxt.client_tools,
        owner_id=None,  # the thread's owner stays; the shared path opens it
        from_queue=nxt.queued_pk,
    )
