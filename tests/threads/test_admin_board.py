"""The sub-agent board of a thread in the admin, and the read-only list of sub-agent tasks."""

from __future__ import annotations

import datetime as dt
import re
import threading
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.timezone import now

from agents.models import Agent
from tests.fakes.anthropic_api import text_turn, tool_turn, tool_use, turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.admin.board import thread_board
from threads.models import Run, SubAgentTask, Thread
from threads.waits import wait_claim_due


@pytest.fixture
def run(db: None) -> Run:
    agent = Agent.objects.create(name="coder-board")
    thread = Thread.objects.create(agui_thread_id="t-board", agent=agent, title="delegating")
    return Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)


def task(run: Run, task_id: str, **fields: Any) -> SubAgentTask:
    defaults: dict[str, Any] = {
        "thread": run.thread,
        "run": run,
        "tool_call_id": f"call-{task_id}",
        "role": "worker",
        "prompt": "do it",
        "model": "claude-test",
        "status": SubAgentTask.Status.SUCCEEDED,
    }
    return SubAgentTask.objects.create(id=task_id, **{**defaults, **fields})


def board_page(client: Client, thread: Thread) -> str:
    response = client.get(f"/admin/threads/thread/{thread.pk}/subagents/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_board_shows_each_task_with_its_outcome(operator, run):
    task(
        run,
        "sub-a",
        role="researcher",
        prompt="Find where the config is parsed",
        summary="It is parsed in settings.py, line 40.",
        conclusion="success",
        tool_calls=[{"id": "1", "name": "grep", "arguments": {}, "isError": False}] * 3,
        input_tokens=1200,
        output_tokens=340,
        iterations=4,
    )
    task(
        run,
        "sub-b",
        role="tester",
        status=SubAgentTask.Status.FAILED,
        error="the tests would not start",
        conclusion="failed",
        tool_calls=[{"id": "1", "name": "bash", "arguments": {}, "isError": True}],
    )
    page = board_page(operator, run.thread)
    for text in (
        "researcher",
        "Find where the config is parsed",
        "It is parsed in settings.py, line 40.",
        "success",
        "claude-test",
        "1200 / 340",
        "4 iterations",
        "the tests would not start",
        "(1 failed)",
        "2 tasks: 1 succeeded, 1 failed",
    ):
        assert text in page, text
    assert re.search(r'<tr id="task-sub-b" class="row\d tl-is-error">', page)
    assert f'href="/admin/threads/run/{run.pk}/timeline/"' in page


def test_nested_tasks_sit_under_their_parent(operator, run):
    started = run.started_at
    task(run, "outer-1", role="planner")
    task(run, "outer-2", role="reviewer")
    task(run, "inner-1", role="reader", parent_task_id="outer-1", depth=2)
    # Start order decides among siblings, whatever the insertion order.
    for i, task_id in enumerate(["outer-1", "inner-1", "outer-2"]):
        SubAgentTask.objects.filter(pk=task_id).update(started_at=started + dt.timedelta(seconds=i))
    rows = thread_board(thread=run.thread).rows
    assert [(row.task.pk, row.level) for row in rows] == [("outer-1", 0), ("inner-1", 1), ("outer-2", 0)]
    page = board_page(operator, run.thread)
    assert page.index('id="task-outer-1"') < page.index('id="task-inner-1"') < page.index('id="task-outer-2"')
    assert '<td style="padding-left: 2em">\n          ↳ <strong>reader</strong>' in page


def test_the_board_refreshes_while_a_task_runs(operator, run):
    running = task(run, "sub-r", status=SubAgentTask.Status.RUNNING)
    page = board_page(operator, run.thread)
    assert f'data-poll-url="/admin/threads/thread/{run.thread.pk}/subagents/poll/"' in page
    version = re.search(r'id="board" data-version="(\w+)"', page)
    assert version is not None
    poll = operator.get(f"/admin/threads/thread/{run.thread.pk}/subagents/poll/").json()
    assert poll == {"live": True, "version": version.group(1)}

    SubAgentTask.objects.filter(pk=running.pk).update(status=SubAgentTask.Status.SUCCEEDED, summary="done")
    poll = operator.get(f"/admin/threads/thread/{run.thread.pk}/subagents/poll/").json()
    assert poll["live"] is False and poll["version"] != version.group(1)
    assert "data-poll-url" not in board_page(operator, run.thread)


def test_the_board_refreshes_while_a_run_of_the_thread_is_live(operator, run):
    assert not thread_board(thread=run.thread).live
    waiting = Run.objects.create(
        thread=run.thread, agui_run_id="r2", status=Run.Status.WAITING, checkpoint={"loop": {}}, wait_deadline=now()
    )
    assert thread_board(thread=run.thread).live
    # Answered, the waiting run is finished and the run that continued it is the live one, until it ends.
    claimed = wait_claim_due(run_id=waiting.pk, run_pk=uuid.uuid4())
    assert claimed is not None
    continued = claimed.run
    assert thread_board(thread=run.thread).live
    Run.objects.filter(pk=continued.pk).update(status=Run.Status.SUCCEEDED)
    assert not thread_board(thread=run.thread).live


def test_an_empty_board_says_so(operator, run):
    assert "No sub-agent has been started on this thread." in board_page(operator, run.thread)


def test_the_task_list_filters_by_status_and_thread_and_links_to_the_board(operator, run):
    other_thread = Thread.objects.create(agui_thread_id="t-elsewhere", agent=run.thread.agent)
    other_run = Run.objects.create(thread=other_thread, agui_run_id="r9")
    task(run, "sub-ok")
    task(run, "sub-failed", status=SubAgentTask.Status.FAILED)
    task(other_run, "sub-far", thread=other_thread)
    listed = operator.get("/admin/threads/subagenttask/", {"status__exact": "failed"}).content.decode()
    assert "sub-failed" in listed and "sub-ok" not in listed and "sub-far" not in listed
    listed = operator.get("/admin/threads/subagenttask/", {"thread__id__exact": str(other_thread.pk)}).content.decode()
    assert "sub-far" in listed and "sub-ok" not in listed
    assert f'href="/admin/threads/thread/{other_thread.pk}/subagents/#task-sub-far"' in listed


def test_tasks_are_read_only_in_the_admin(operator, run):
    task(run, "sub-ro", summary="kept")
    page = operator.get("/admin/threads/subagenttask/sub-ro/change/").content.decode()
    assert "kept" in page and 'name="summary"' not in page
    assert operator.get("/admin/threads/subagenttask/add/").status_code == 403
    response = operator.post("/admin/threads/subagenttask/sub-ro/change/", {"summary": "changed"})
    assert response.status_code == 403
    assert SubAgentTask.objects.get(pk="sub-ro").summary == "kept"


def test_the_board_is_for_staff_only(client, run):
    client.force_login(User.objects.create_user("visitor"))
    response = client.get(f"/admin/threads/thread/{run.thread.pk}/subagents/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    client.force_login(User.objects.create_user("staff", is_staff=True))
    assert client.get(f"/admin/threads/thread/{run.thread.pk}/subagents/").status_code == 403
    assert client.get(f"/admin/threads/thread/{run.thread.pk}/subagents/poll/").status_code == 403


def test_a_live_delegation_shows_on_the_board_and_in_the_timeline(server, fake_api, client):
    delegate = turn(tool_use("sub_agent", {"task": "CHILD: read app.py", "role": "reader"}, id="toolu_d"))
    fake_api.script([delegate, text_turn(["It returns hello."])])
    slow = text_turn(["main ", "returns ", "hello."]).pause(after_events=4)
    fake_api.script_for("CHILD", [tool_turn("file_read", {"path": "src/app.py"}, id="toolu_c1"), slow])
    client.force_login(User.objects.create_superuser("operator", "op@example.com", None))

    finished: list[Any] = []
    worker = threading.Thread(
        target=lambda: finished.append(post_run(server.url, "coder", v1(run_input("t-live-sub", "r1", user("go"))))),
    )
    worker.start()
    try:
        assert slow.paused.wait(10), "the child never reached its second model call"
        thread = Thread.objects.get(agui_thread_id="t-live-sub")
        page = board_page(client, thread)
        assert "reader" in page and "CHILD: read app.py" in page and "Running" in page
        poll_url = f"/admin/threads/thread/{thread.pk}/subagents/poll/"
        assert f'data-poll-url="{poll_url}"' in page
        while_running = client.get(poll_url).json()
        assert while_running["live"] is True
    finally:
        slow.resume.set()
        worker.join(30)
    server.drain()
    assert finished and finished[0].events[-1]["type"] == "RUN_FINISHED"

    after = client.get(poll_url).json()
    assert after["live"] is False and after["version"] != while_running["version"]
    page = board_page(client, thread)
    assert "Succeeded" in page and "main returns hello." in page
    assert re.search(r"<td>1</td>\s*<td>\d+ / \d+", page)  # one tool call, and its tokens
    run = Run.objects.get(thread=thread, agui_run_id="r1")
    timeline = client.get(f"/admin/threads/run/{run.pk}/timeline/").content.decode()
    task_id = SubAgentTask.objects.get(thread=thread).pk
    assert f'#task-{task_id}">sub-agent reader</a>' in timeline
    assert "sub-agent started" in timeline and "sub-agent finished" in timeline
    assert f'<span class="tl-badge">sub-agent {task_id}</span>' in timeline  # the child's own events
    assert "tool call <strong>file_read</strong>" in timeline
