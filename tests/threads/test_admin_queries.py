"""No admin page's query count grows with its rows: every list and page is measured at two sizes."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Agent, PermissionRule
from tests.eventlogs import log_events
from threads.models import Approval, Message, Run, Session, SubAgentTask, Thread

_ids = itertools.count(1)


@pytest.fixture
def focus(db: None) -> Run:
    """A thread and a waiting run that every size adds rows to."""
    agent = Agent.objects.create(name="coder-focus")
    thread = Thread.objects.create(agui_thread_id="t-focus", agent=agent)
    Session.objects.create(thread=thread)
    return Run.objects.create(thread=thread, agui_run_id="r-focus", status=Run.Status.WAITING)


def grow(focus: Run, n: int) -> None:
    """``n`` more of everything: agents, owners, threads, messages, runs, events, approvals, tasks, rules."""
    now = timezone.now()
    for _ in range(n):
        i = next(_ids)
        owner = User.objects.create_user(f"owner{i}")
        agent = Agent.objects.create(name=f"agent-{i}")
        PermissionRule.objects.create(position=i, decision="ask", scope="agent", agent=agent, tool="bash")
        thread = Thread.objects.create(agui_thread_id=f"t-{i}", agent=agent, owner=owner, title=f"thread {i}")
        Message.objects.create(thread=thread, position=0, message_id="m", role="user", body={"content": "hi"})
        run = Run.objects.create(thread=thread, agui_run_id=f"r-{i}", status=Run.Status.WAITING)
        Run.objects.create(thread=thread, agui_run_id=f"r-{i}-continued", parent=run)
        Approval.objects.create(
            id=f"a-{i}", run=run, tool_call_id=f"c-{i}", tool="bash", message="?", expires_at=now + dt.timedelta(1)
        )
        parent = SubAgentTask.objects.create(
            id=f"s-{i}", thread=thread, run=run, tool_call_id=f"c-{i}", role="r", prompt="p", model="m"
        )
        SubAgentTask.objects.create(
            id=f"s-{i}-child", thread=thread, run=run, parent_task=parent, tool_call_id="cc", role="r", prompt="p"
        )
    # The focus thread and its run get their share too: messages, tasks, events, approvals, continuations.
    thread = focus.thread
    base = Message.objects.filter(thread=thread).count()
    Message.objects.bulk_create(
        Message(thread=thread, position=base + k, message_id=f"fm{base + k}", role="assistant", body={"content": "x"})
        for k in range(n * 5)
    )
    tail = Run.objects.filter(thread=thread).order_by("-started_at").first()
    assert tail is not None
    for k in range(n):
        i = next(_ids)
        events = [
            {"type": "TEXT_MESSAGE_START", "messageId": f"m{i}", "role": "assistant"},
            {"type": "TEXT_MESSAGE_CONTENT", "messageId": f"m{i}", "delta": "words "},
            {"type": "TEXT_MESSAGE_END", "messageId": f"m{i}"},
            {"type": "TOOL_CALL_START", "toolCallId": f"fc-{i}", "toolCallName": "bash"},
            {"type": "TOOL_CALL_ARGS", "toolCallId": f"fc-{i}", "delta": "{}"},
            {"type": "TOOL_CALL_END", "toolCallId": f"fc-{i}"},
            {"type": "TOOL_CALL_RESULT", "messageId": "x", "toolCallId": f"fc-{i}", "content": "ok"},
            {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/todos/-", "value": {}}]},
        ]
        log_events(tail, events, per_frame=2)
        Approval.objects.create(
            id=f"fa-{i}", run=tail, tool_call_id=f"fc-{i}", tool="bash", message="?", expires_at=now + dt.timedelta(1)
        )
        SubAgentTask.objects.create(
            id=f"fs-{i}", thread=thread, run=tail, tool_call_id=f"fc-{i}", role="r", prompt="p", model="m"
        )
        if k % 2:  # the agent run waits and goes on in another Run row
            tail = Run.objects.create(thread=thread, agui_run_id=f"r-focus-{i}", parent=tail, status=Run.Status.WAITING)


PAGES: dict[str, Callable[[Run], str]] = {
    "agents": lambda focus: "/admin/agents/agent/",
    "permission rules": lambda focus: "/admin/agents/permissionrule/",
    "threads": lambda focus: "/admin/threads/thread/",
    "runs": lambda focus: "/admin/threads/run/",
    "approvals": lambda focus: "/admin/threads/approval/",
    "sub-agent tasks": lambda focus: "/admin/threads/subagenttask/",
    "thread with its messages": lambda focus: f"/admin/threads/thread/{focus.thread.pk}/change/",
    "run": lambda focus: f"/admin/threads/run/{focus.pk}/change/",
    "timeline": lambda focus: f"/admin/threads/run/{focus.pk}/timeline/",
    "timeline poll": lambda focus: f"/admin/threads/run/{focus.pk}/timeline/poll/",
    "sub-agent board": lambda focus: f"/admin/threads/thread/{focus.thread.pk}/subagents/",
    "sub-agent board poll": lambda focus: f"/admin/threads/thread/{focus.thread.pk}/subagents/poll/",
}


def queries(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


@pytest.mark.parametrize("page", PAGES)
def test_the_query_count_does_not_grow_with_rows(operator, focus, page):
    url = PAGES[page](focus)
    grow(focus, 2)
    operator.get(url)  # the first request fills per-process caches (content types, ...)
    small = queries(operator, url)
    grow(focus, 8)
    assert queries(operator, url) == small, f"{page}: {url}"


def test_the_timeline_of_a_run_with_thousands_of_events_stays_a_few_queries(operator, focus):
    deltas = [{"type": "TEXT_MESSAGE_CONTENT", "messageId": f"m{k // 500}", "delta": "w "} for k in range(5000)]
    log_events(focus, deltas, per_frame=50)
    url = f"/admin/threads/run/{focus.pk}/timeline/"
    assert queries(operator, url) <= 12
