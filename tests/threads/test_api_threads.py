"""GET /api/threads/ and a thread's detail, state document, runs and sub-agent board."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from tests import api_world as world

NOON = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def people(db):
    return world.People.create()


def _ids(response):
    assert response.status_code == 200, response.content
    return [row["threadId"] for row in response.json()["results"]]


def test_threads_come_most_recently_updated_first(people):
    for hours, name in [(1, "t-old"), (3, "t-new"), (2, "t-mid")]:
        world.thread(name, owner=people.owner, updated_at=NOON + dt.timedelta(hours=hours))
    response = people.owner.get("threads/")
    assert _ids(response) == ["t-new", "t-mid", "t-old"]
    first = response.json()["results"][0]
    assert first["agent"] == "coder" and first["owner"] == "olive" and first["title"] == "about t-new"
    assert first["updatedAt"] == "2026-05-01T15:00:00Z"


def test_a_thread_row_counts_its_messages_and_runs(people):
    thread = world.thread("t-1", owner=people.owner)
    for position in range(3):
        world.message(thread, position, f"hello {position}")
    world.run(thread, "r1")
    world.run(thread, "r2")
    row = people.owner.get("threads/").json()["results"][0]
    assert (row["messageCount"], row["runCount"]) == (3, 2)


def test_threads_filter_by_agent_name(people):
    world.thread("t-coder", owner=people.owner)
    world.thread("t-reviewer", owner=people.owner, agent_name="reviewer")
    assert _ids(people.owner.get("threads/", agent="reviewer")) == ["t-reviewer"]
    assert _ids(people.owner.get("threads/", agent="nobody")) == []


def test_staff_filter_threads_by_owner_username_or_id(people):
    world.thread("t-olive", owner=people.owner)
    world.thread("t-stan", owner=people.stranger)
    world.thread("t-orphan", owner=None)
    assert _ids(people.staff.get("threads/", owner="olive")) == ["t-olive"]
    assert _ids(people.staff.get("threads/", owner=str(people.stranger.user.pk))) == ["t-stan"]
    assert _ids(people.staff.get("threads/", owner="9" * 40)) == []
    assert sorted(_ids(people.staff.get("threads/"))) == ["t-olive", "t-orphan", "t-stan"]


def test_threads_filter_by_updated_since(people):
    world.thread("t-before", owner=people.owner, updated_at=NOON - dt.timedelta(seconds=1))
    world.thread("t-at", owner=people.owner, updated_at=NOON)
    world.thread("t-after", owner=people.owner, updated_at=NOON + dt.timedelta(days=1))
    assert _ids(people.owner.get("threads/", updated_since="2026-05-01T12:00:00Z")) == ["t-after", "t-at"]
    # Another offset, and a time without one (taken as UTC), name the same instant.
    assert _ids(people.owner.get("threads/", updated_since="2026-05-01T14:00:00+02:00")) == ["t-after", "t-at"]
    assert _ids(people.owner.get("threads/", updated_since="2026-05-01T12:00:00")) == ["t-after", "t-at"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"updated_since": "yesterday"}, "updated_since"),
        ({"updated_since": "2026-13-01T00:00:00Z"}, "updated_since"),
        ({"page": "0"}, "page"),
        ({"page": "two"}, "page"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "501"}, "page_size"),
        ({"agent": "x" * 65}, "agent"),
    ],
)
def test_a_bad_query_value_is_a_400_naming_the_parameter(people, params, field):
    response = people.owner.get("threads/", **params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_input" and error["field"] == field
    assert error["message"].startswith(f"{field}: ")


def test_pages_cover_every_thread_once_even_when_times_tie(people):
    names = [f"t-{n:02}" for n in range(7)]
    for name in names:
        world.thread(name, owner=people.owner, updated_at=NOON)
    seen, page = [], 1
    while True:
        body = people.owner.get("threads/", page=page, page_size=3).json()
        assert body["count"] == 7
        seen += [row["threadId"] for row in body["results"]]
        if body["next"] is None:
            break
        assert "page=" in body["next"] and "page_size=3" in body["next"]
        page += 1
    assert page == 3 and sorted(seen) == names and len(set(seen)) == 7
    assert seen == _ids(people.owner.get("threads/", page_size=10))


def test_a_page_past_the_last_is_a_404_that_says_so(people):
    world.thread("t-1", owner=people.owner)
    response = people.owner.get("threads/", page=2)
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "page 2 is past the last page (1)"


def test_the_thread_detail_carries_the_transcript_in_position_order(people):
    thread = world.thread("t-1", owner=people.owner)
    world.message(thread, 1, "Hi, how can I help?", role="assistant")
    world.message(thread, 0, "hello")
    world.message(thread, 2, "Explain the code.")
    body = people.owner.get("threads/t-1/").json()
    assert body["threadId"] == "t-1" and body["messageCount"] == 3
    assert body["messages"] == [
        {"id": "t-1-m0", "role": "user", "content": "hello"},
        {"id": "t-1-m1", "role": "assistant", "content": "Hi, how can I help?"},
        {"id": "t-1-m2", "role": "user", "content": "Explain the code."},
    ]


def test_an_unknown_thread_is_a_404(people):
    response = people.staff.get("threads/t-none/")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "no such thread"


def test_the_state_document_is_returned_as_stored(people):
    state = {"todos": [{"id": "1", "content": "write tests", "status": "in_progress"}], "files": ["a.py"]}
    world.thread("t-1", owner=people.owner, state=state)
    world.thread("t-empty", owner=people.owner)
    assert people.owner.get("threads/t-1/state/").json() == state
    assert people.owner.get("threads/t-empty/state/").json() == {}


def test_a_threads_runs_come_newest_first_with_their_ids(people):
    thread = world.thread("t-1", owner=people.owner)
    first = world.run(thread, "r1", status="waiting", input_tokens=10, output_tokens=4)
    world.run(thread, "r1-continued", parent=first, status="succeeded", outcome="success")
    world.run(world.thread("t-other", owner=people.owner), "r1")
    body = people.owner.get("threads/t-1/runs/").json()
    assert body["count"] == 2
    newest, oldest = body["results"]
    assert (newest["runId"], newest["parentId"], newest["status"]) == ("r1-continued", str(first.pk), "succeeded")
    assert (oldest["runId"], oldest["id"], oldest["threadId"]) == ("r1", str(first.pk), "t-1")
    assert oldest["usage"] == {"inputTokens": 10, "outputTokens": 4, "cacheReadTokens": 0, "cacheWriteTokens": 0}


def test_a_threads_runs_are_paginated(people):
    thread = world.thread("t-1", owner=people.owner)
    for n in range(5):
        world.run(thread, f"r{n}")
    body = people.owner.get("threads/t-1/runs/", page=2, page_size=2).json()
    assert body["count"] == 5 and len(body["results"]) == 2
    assert body["previous"] is not None and body["next"] is not None


def test_a_threads_sub_agent_board_lists_its_tasks_in_the_order_they_started(people):
    thread = world.thread("t-1", owner=people.owner)
    parent = world.run(thread)
    later = world.subagent_task(parent, "sa-later", role="tester")
    world.subagent_task(parent, "sa-first", role="reviewer", status="succeeded", conclusion="success")
    type(later).objects.filter(pk="sa-later").update(started_at=timezone.now() + dt.timedelta(seconds=5))
    world.subagent_task(world.run(world.thread("t-other", owner=people.owner)), "sa-elsewhere")
    rows = people.owner.get("threads/t-1/subagent-tasks/").json()["results"]
    assert [(row["id"], row["role"], row["status"]) for row in rows] == [
        ("sa-first", "reviewer", "succeeded"),
        ("sa-later", "tester", "running"),
    ]
    assert rows[0]["conclusion"] == "success" and rows[0]["runUuid"] == str(parent.pk)
