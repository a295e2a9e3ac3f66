"""The people and rows the REST API tests share.

Three people with real DRF tokens: an owner, a stranger (another user, who owns
nothing here) and a staff member; and small builders for threads and what hangs
under them, written straight to the database as the runs would write them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Agent
from tests.eventlogs import log_events
from threads import leases
from threads.logframes import LoggedEvent
from threads.models import Approval, Message, Run, SubAgentTask, Thread


@dataclass
class Person:
    user: User
    api: APIClient

    def get(self, path: str, **params: Any) -> Any:
        return self.api.get(f"/api/{path}", params)


def person(username: str, *, staff: bool = False) -> Person:
    # No password: the API takes tokens only, and hashing one costs a third of a second per person.
    user = User.objects.create_user(username, password=None, is_staff=staff)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return Person(user, api)


def anonymous() -> Person:
    return Person(User(username="nobody"), APIClient())


@dataclass
class People:
    owner: Person
    stranger: Person
    staff: Person
    anonymous: Person

    @classmethod
    def create(cls) -> People:
        return cls(person("olive"), person("stan"), person("ops", staff=True), anonymous())


def agent(name: str = "coder") -> Agent:
    return Agent.objects.get_or_create(name=name, defaults={"system_prompt": f"secret prompt of {name}"})[0]


def thread(
    agui_thread_id: str,
    *,
    owner: Person | None,
    agent_name: str = "coder",
    updated_at: dt.datetime | None = None,
    state: dict[str, Any] | None = None,
) -> Thread:
    made = Thread.objects.create(
        agui_thread_id=agui_thread_id,
        agent=agent(agent_name),
        owner=owner.user if owner else None,
        title=f"about {agui_thread_id}",
        state=state or {},
    )
    if updated_at is not None:
        # auto_now would overwrite it on save().
        Thread.objects.filter(pk=made.pk).update(updated_at=updated_at)
        made.refresh_from_db()
    return made


def message(of: Thread, position: int, text: str, role: str = "user") -> Message:
    message_id = f"{of.agui_thread_id}-m{position}"
    return Message.objects.create(
        thread=of,
        position=position,
        message_id=message_id,
        role=role,
        body={"id": message_id, "role": role, "content": text},
    )


def run(of: Thread, agui_run_id: str = "r1", **fields: Any) -> Run:
    """A run as this (live) process holds it: answers to its approvals have somewhere to go."""
    fields.setdefault("owner", leases.owner_id())
    fields.setdefault("lease_expires_at", leases.lease_until())
    return Run.objects.create(thread=of, agui_run_id=agui_run_id, **fields)


def events(of: Run, count: int, *, per_frame: int = 4) -> list[LoggedEvent]:
    """``count`` text deltas logged in frames of ``per_frame``, so a page may start or end mid-frame."""
    deltas = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": f"part {seq}"} for seq in range(1, count + 1)]
    return log_events(of, deltas, per_frame=per_frame)


def approval(of: Run, approval_id: str, *, decision: str = Approval.Decision.PENDING) -> Approval:
    """A question a run asked. Only a waiting run asks, so a run still in its default state becomes one."""
    if decision == Approval.Decision.PENDING and of.status == Run.Status.RUNNING:
        Run.objects.filter(pk=of.pk).update(status=Run.Status.WAITING, checkpoint={"loop": {}})
        of.status = Run.Status.WAITING
    return Approval.objects.create(
        id=approval_id,
        run=of,
        tool_call_id=f"toolu_{approval_id}",
        tool="bash",
        arguments={"command": "make test"},
        message="Run make test?",
        decision=decision,
        expires_at=timezone.now() + dt.timedelta(minutes=10),
    )


def subagent_task(of: Run, task_id: str, **fields: Any) -> SubAgentTask:
    defaults: dict[str, Any] = {
        "tool_call_id": f"toolu_{task_id}",
        "role": "reviewer",
        "prompt": "Review the diff.",
        "model": "claude-test",
        "tool_calls": [{"id": "toolu_1", "name": "file_read", "arguments": {"path": "a.py"}, "isError": False}],
    }
    return SubAgentTask.objects.create(id=task_id, thread=of.thread, run=of, **{**defaults, **fields})
