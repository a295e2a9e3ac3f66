"""GET /api/subagent-tasks/ and /api/subagent-tasks/<id>/: the child runs a run delegated."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests import api_world as world
from threads.models import SubAgentTask


@pytest.fixture
def people(db):
    return world.People.create()


@pytest.fixture
def parent(people):
    return world.run(world.thread("t-1", owner=people.owner))


def _ids(response):
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_tasks_come_newest_first(people, parent):
    for minutes, task_id in [(1, "sa-a"), (3, "sa-c"), (2, "sa-b")]:
        world.subagent_task(parent, task_id)
        SubAgentTask.objects.filter(pk=task_id).update(started_at=timezone.now() + dt.timedelta(minutes=minutes))
    assert _ids(people.owner.get("subagent-tasks/")) == ["sa-c", "sa-b", "sa-a"]


def test_tasks_filter_by_status(people, parent):
    world.subagent_task(parent, "sa-running")
    world.subagent_task(parent, "sa-done", status=SubAgentTask.Status.SUCCEEDED)
    world.subagent_task(parent, "sa-capped", status=SubAgentTask.Status.STOPPED)
    assert _ids(people.owner.get("subagent-tasks/", status="succeeded")) == ["sa-done"]
    assert _ids(people.owner.get("subagent-tasks/", status="stopped")) == ["sa-capped"]


def test_a_status_that_does_not_exist_is_a_400_naming_it(people, parent):
    response = people.owner.get("subagent-tasks/", status="finished")
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "status"
    assert "finished" in response.json()["error"]["message"]


def test_tasks_are_paginated(people, parent):
    for n in range(5):
        world.subagent_task(parent, f"sa-{n}")
    body = people.owner.get("subagent-tasks/", page=3, page_size=2).json()
    assert body["count"] == 5 and len(body["results"]) == 1 and body["next"] is None


def test_a_task_shows_its_prompt_tool_calls_outcome_and_usage(people, parent):
    first = world.subagent_task(parent, "sa-1")
    world.subagent_task(
        parent,
        "sa-2",
        parent_task=first,
        depth=2,
        status=SubAgentTask.Status.FAILED,
        context="The diff is in a.py.",
        allowed_tools=["file_read", "grep"],
        summary="Found one bug.",
        conclusion="failed",
        error="gave up",
        iterations=4,
        input_tokens=1200,
        output_tokens=300,
        finished_at=timezone.now(),
    )
    body = people.owner.get("subagent-tasks/sa-2/").json()
    assert (body["threadId"], body["runId"], body["runUuid"]) == ("t-1", "r1", str(parent.pk))
    assert (body["parentTaskId"], body["depth"], body["status"]) == ("sa-1", 2, "failed")
    assert (body["prompt"], body["context"], body["allowedTools"]) == (
        "Review the diff.",
        "The diff is in a.py.",
        ["file_read", "grep"],
    )
    assert body["toolCalls"] == [
        {"id": "toolu_1", "name": "file_read", "arguments": {"path": "a.py"}, "isError": False}
    ]
    assert (body["summary"], body["conclusion"]) == ("Found one bug.", "failed")
    assert body["error"] == "gave up"
    assert body["usage"] == {"inputTokens": 1200, "outputTokens": 300, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    assert body["iterations"] == 4 and body["finishedAt"] is not None
    assert "systemPrompt" not in body


def test_an_unknown_task_is_a_404(people, parent):
    response = people.owner.get("subagent-tasks/sa-none/")
    assert response.status_code == 404 and response.json()["error"]["message"] == "no such sub-agent task"
