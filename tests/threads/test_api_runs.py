"""GET /api/runs/<id>/ and its event log, /api/runs/<id>/events/?after=<seq>."""

from __future__ import annotations

import uuid

import pytest

from tests import api_world as world


@pytest.fixture
def people(db):
    return world.People.create()


def test_a_run_is_addressed_by_its_uuid_and_shows_its_agui_ids(people):
    run = world.run(world.thread("t-1", owner=people.owner), "r1", status="failed", error="model overloaded")
    body = people.owner.get(f"runs/{run.pk}/").json()
    assert (body["id"], body["runId"], body["threadId"]) == (str(run.pk), "r1", "t-1")
    assert (body["status"], body["error"], body["finishedAt"]) == ("failed", "model overloaded", None)


def test_the_same_agui_run_id_in_two_threads_is_two_runs(people):
    mine = world.run(world.thread("t-1", owner=people.owner), "r1")
    other = world.run(world.thread("t-2", owner=people.owner), "r1", status="succeeded")
    assert people.owner.get(f"runs/{mine.pk}/").json()["threadId"] == "t-1"
    assert people.owner.get(f"runs/{other.pk}/").json()["threadId"] == "t-2"


def test_an_unknown_run_is_a_404(people):
    response = people.staff.get(f"runs/{uuid.uuid4()}/")
    assert response.status_code == 404 and response.json()["error"]["message"] == "no such run"
    assert people.staff.get(f"runs/{uuid.uuid4()}/events/").status_code == 404


def test_events_come_in_order_with_their_json_payload(people):
    run = world.run(world.thread("t-1", owner=people.owner))
    world.events(run, 3)
    body = people.owner.get(f"runs/{run.pk}/events/").json()
    assert body["count"] == 3 and body["next"] is None
    assert [event["seq"] for event in body["results"]] == [1, 2, 3]
    first = body["results"][0]
    assert first["type"] == "TEXT_MESSAGE_CONTENT" and first["createdAt"].endswith("Z")
    assert first["payload"] == {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "part 1"}


def test_after_gives_only_the_later_events(people):
    run = world.run(world.thread("t-1", owner=people.owner))
    world.events(run, 10)
    body = people.owner.get(f"runs/{run.pk}/events/", after=7).json()
    assert [event["seq"] for event in body["results"]] == [8, 9, 10]
    assert people.owner.get(f"runs/{run.pk}/events/", after=10).json() == {
        "count": 0,
        "next": None,
        "previous": None,
        "results": [],
    }


def test_events_are_paginated_after_a_seq(people):
    run = world.run(world.thread("t-1", owner=people.owner))
    world.events(run, 12)
    first = people.owner.get(f"runs/{run.pk}/events/", after=2, page_size=4).json()
    assert first["count"] == 10 and [event["seq"] for event in first["results"]] == [3, 4, 5, 6]
    assert "after=2" in first["next"] and "page=2" in first["next"]
    second = people.owner.api.get(first["next"]).json()
    assert [event["seq"] for event in second["results"]] == [7, 8, 9, 10]


@pytest.mark.parametrize("after", ["-1", "seven", "1.5", str(2**31)])
def test_a_bad_after_is_a_400_naming_it(people, after):
    run = world.run(world.thread("t-1", owner=people.owner))
    response = people.owner.get(f"runs/{run.pk}/events/", after=after)
    assert response.status_code == 400
    assert response.json()["error"]["field"] == "after"


def test_another_users_run_is_a_404_even_by_its_exact_id(people):
    run = world.run(world.thread("t-1", owner=people.owner))
    world.events(run, 2)
    assert people.stranger.get(f"runs/{run.pk}/").status_code == 404
    assert people.stranger.get(f"runs/{run.pk}/events/").status_code == 404
    assert people.staff.get(f"runs/{run.pk}/events/").json()["count"] == 2
