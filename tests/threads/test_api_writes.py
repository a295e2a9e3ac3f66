"""Staff read, and write only with permissions: every REST write is allowed to the owner of the
thread it changes and to staff with the model's change permission (as the admin requires), and
refused to other staff with a 403 that changes nothing. Another user gets the 404 of reads."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import URLPattern, URLResolver, get_resolver

from tests import api_world as world
from threads.models import Approval, Run

# Every route of the API that accepts a write, with the body of a valid one. A route added with a
# write must be added here (test_no_other_route_accepts_a_write fails until it is).
WRITES: dict[str, dict[str, Any]] = {"approvals/{approval}/answer": {"approved": True}}
UNSAFE = ("post", "put", "patch", "delete")


@pytest.fixture
def people(db):
    return world.People.create()


@pytest.fixture
def approver(db) -> world.Person:
    """Staff with the change permission on approvals, and nothing else."""
    made = world.person("approver", staff=True)
    made.user.user_permissions.add(Permission.objects.get(codename="change_approval"))
    return made


@pytest.fixture
def ids(people) -> dict[str, str]:
    run = world.run(world.thread("t-olive", owner=people.owner))
    world.approval(run, "ap-olive")
    return {"approval": "ap-olive"}


def _snapshot() -> list[tuple[Any, ...]]:
    return [
        *Approval.objects.order_by("pk").values_list("pk", "decision", "answered_by", "answered_at"),
        *Run.objects.order_by("pk").values_list("pk", "status", "wait_deadline"),
    ]


def _write(who: world.Person, path: str, body: dict[str, Any]) -> Any:
    return who.api.post(f"/api/{path}", body, format="json")


@pytest.mark.parametrize("path", WRITES)
def test_staff_without_the_permission_get_a_403_and_nothing_changes(people, ids, path):
    before = _snapshot()
    response = _write(people.staff, path.format(**ids), WRITES[path])
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "permission_denied"
    assert "change permission" in error["message"]
    assert _snapshot() == before
    # What they may do is read it, as before.
    assert people.staff.get("approvals/ap-olive/").status_code == 200


@pytest.mark.parametrize("path", WRITES)
def test_another_user_gets_the_404_of_reads_and_nothing_changes(people, ids, path):
    before = _snapshot()
    response = _write(people.stranger, path.format(**ids), WRITES[path])
    assert response.status_code == 404
    assert _snapshot() == before


@pytest.mark.parametrize("path", WRITES)
def test_staff_with_the_change_permission_may_write(people, ids, approver, path):
    response = _write(approver, path.format(**ids), WRITES[path])
    assert response.status_code == 200, response.content
    assert Approval.objects.get(pk="ap-olive").answered_by == "approver"


@pytest.mark.parametrize("path", WRITES)
def test_the_owner_may_write(people, ids, path):
    response = _write(people.owner, path.format(**ids), WRITES[path])
    assert response.status_code == 200, response.content
    assert Approval.objects.get(pk="ap-olive").answered_by == "olive"


def test_a_thread_of_the_shared_token_is_answered_only_with_the_permission(people, approver):
    run = world.run(world.thread("t-shared", owner=None))
    world.approval(run, "ap-shared")
    assert _write(people.staff, "approvals/ap-shared/answer", {"approved": True}).status_code == 403
    assert Approval.objects.get(pk="ap-shared").decision == Approval.Decision.PENDING
    assert _write(approver, "approvals/ap-shared/answer", {"approved": False}).status_code == 200
    assert Approval.objects.get(pk="ap-shared").decision == Approval.Decision.DENIED


def test_the_permission_without_staff_does_not_reach_another_users_approval(people, ids):
    """The admin needs staff and the permission; a user who is not staff does not even see it."""
    people.stranger.user.user_permissions.add(Permission.objects.get(codename="change_approval"))
    assert _write(people.stranger, "approvals/ap-olive/answer", {"approved": True}).status_code == 404
    assert Approval.objects.get(pk="ap-olive").decision == Approval.Decision.PENDING


def _routes(patterns: list[URLPattern | URLResolver], prefix: str = "") -> list[str]:
    found: list[str] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            found += _routes(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            found.append(prefix + str(pattern.pattern))
    return found


def test_no_other_route_accepts_a_write(people, ids):
    """Staff without permissions try every method that writes on every route of the API: the writes
    listed above are refused with 403, every other route answers 405, and nothing changes."""
    routes = [route for route in _routes(get_resolver().url_patterns) if route.startswith("api/")]
    assert len(routes) > 15
    before = _snapshot()
    for route in routes:
        path = (
            route.removeprefix("api/")
            .replace("<str:thread_id>", "t-olive")
            .replace("<str:approval_id>", "ap-olive")
            .replace("<uuid:run_id>", str(Run.objects.get().pk))
            .replace("<str:task_id>", "sa")
            .replace("<str:name>", "coder")
            .replace("<int:rule_id>", "1")
        )
        assert "<" not in path, route
        is_write = path in {write.format(**ids) for write in WRITES}
        for method in UNSAFE:
            response = getattr(people.staff.api, method)(f"/api/{path}", {"approved": True}, format="json")
            expected = 403 if is_write and method == "post" else 405
            assert response.status_code == expected, (method, route, response.status_code)
    assert _snapshot() == before
