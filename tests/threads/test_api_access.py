"""Who sees what through the REST API: owners their own threads and all under them, staff everything,
another user a 404 (never a 403, so ids do not leak), anonymous callers a 401 in JSON."""

from __future__ import annotations

import pytest

from agents.models import PermissionRule
from tests import api_world as world

OBJECTS = [
    "threads/t-olive/",
    "threads/t-olive/state/",
    "threads/t-olive/runs/",
    "threads/t-olive/subagent-tasks/",
    "runs/{run}/",
    "runs/{run}/events/",
    "approvals/ap-olive/",
    "subagent-tasks/sa-olive/",
    "permission-rules/{thread_rule}/",
]
LISTS = ["threads/", "approvals/", "subagent-tasks/"]
SHARED = ["agents/", "agents/coder/", "permission-rules/", "permission-rules/{global_rule}/"]


@pytest.fixture
def people(db):
    return world.People.create()


@pytest.fixture
def ids(people):
    thread = world.thread("t-olive", owner=people.owner, state={"todos": []})
    run = world.run(thread)
    world.events(run, 3)
    world.approval(run, "ap-olive")
    world.subagent_task(run, "sa-olive")
    thread_rule = PermissionRule.objects.create(position=1, decision="allow", scope="thread", thread_agui_id="t-olive")
    global_rule = PermissionRule.objects.create(position=2, decision="ask", tool="bash")
    return {"run": run.pk, "thread_rule": thread_rule.pk, "global_rule": global_rule.pk}


@pytest.mark.parametrize("path", OBJECTS + LISTS + SHARED)
def test_anonymous_callers_get_a_401_in_json(people, ids, path):
    response = people.anonymous.get(path.format(**ids))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Token"


def test_an_unknown_token_is_a_401(people, ids):
    people.anonymous.api.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = people.anonymous.get("threads/")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Invalid token."


@pytest.mark.parametrize("path", OBJECTS + LISTS + SHARED)
@pytest.mark.parametrize("who", ["owner", "staff"])
def test_the_owner_and_staff_see_the_thread_and_all_under_it(people, ids, path, who):
    response = getattr(people, who).get(path.format(**ids))
    assert response.status_code == 200
    if "results" in response.json():
        assert response.json()["count"] >= 1


@pytest.mark.parametrize("path", OBJECTS)
def test_another_user_gets_a_404_for_what_is_not_theirs(people, ids, path):
    response = people.stranger.get(path.format(**ids))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize("path", LISTS)
def test_another_users_lists_leave_out_what_is_not_theirs(people, ids, path):
    response = people.stranger.get(path)
    assert response.status_code == 200
    assert response.json()["count"] == 0 and response.json()["results"] == []


def test_another_user_sees_the_shared_rules_but_not_a_thread_rule(people, ids):
    listed = people.stranger.get("permission-rules/").json()["results"]
    assert [rule["id"] for rule in listed] == [ids["global_rule"]]
    assert people.owner.get("permission-rules/").json()["count"] == 2


def test_another_users_filters_cannot_reach_the_owners_threads(people, ids):
    assert people.stranger.get("threads/", owner="olive").json()["count"] == 0
    assert people.stranger.get("approvals/", thread="t-olive").json()["count"] == 0


def test_a_path_under_api_that_matches_nothing_is_a_json_404(people):
    for path in ["nothing-here/", "runs/not-a-uuid/", "permission-rules/abc/"]:
        response = people.owner.get(path)
        assert response.status_code == 404
        assert response.json() == {"error": {"code": "not_found", "message": "no such API path"}}


def test_the_api_does_not_write_except_the_answer(people, ids):
    for path in ["threads/", "threads/t-olive/", "runs/{run}/", "approvals/ap-olive/", "agents/coder/"]:
        response = people.staff.api.post(f"/api/{path.format(**ids)}", {}, format="json")
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"


def test_an_unknown_query_parameter_is_a_400_naming_it(people, ids):
    response = people.owner.get("threads/", updatedSince="2026-01-01T00:00:00Z")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["field"] == "updatedSince"
    known = "agent, owner, page, page_size, updated_since"
    assert error["message"] == f"updatedSince: unknown query parameter (known: {known})"
    assert people.owner.get("threads/t-olive/", page="1").json()["error"]["field"] == "page"


def test_authentication_comes_before_the_query(people, ids):
    assert people.anonymous.get("threads/", nonsense="1").status_code == 401
