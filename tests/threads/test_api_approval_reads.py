"""GET /api/approvals/ (pending, thread filters) and /api/approvals/<id>/.

Answering one, and the waiting run going on, is in test_api_approvals.py."""

from __future__ import annotations

import pytest

from tests import api_world as world
from threads.models import Approval, Run


@pytest.fixture
def people(db):
    return world.People.create()


@pytest.fixture
def asked(people):
    first = world.run(world.thread("t-1", owner=people.owner))
    second = world.run(world.thread("t-2", owner=people.owner))
    world.approval(first, "ap-old", decision=Approval.Decision.DENIED)
    world.approval(first, "ap-pending")
    world.approval(second, "ap-other")
    return first


def _ids(response):
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_approvals_come_newest_first(people, asked):
    assert _ids(people.owner.get("approvals/")) == ["ap-other", "ap-pending", "ap-old"]


@pytest.mark.parametrize("flag", ["1", "true"])
def test_pending_keeps_the_approvals_still_waiting(people, asked, flag):
    assert _ids(people.owner.get("approvals/", pending=flag)) == ["ap-other", "ap-pending"]


def test_pending_false_is_every_approval(people, asked):
    assert len(_ids(people.owner.get("approvals/", pending="0"))) == 3


def test_thread_keeps_one_threads_approvals(people, asked):
    assert _ids(people.owner.get("approvals/", thread="t-1")) == ["ap-pending", "ap-old"]
    assert _ids(people.owner.get("approvals/", thread="t-1", pending=1)) == ["ap-pending"]


def test_a_bad_pending_is_a_400_naming_it(people, asked):
    response = people.owner.get("approvals/", pending="perhaps")
    assert response.status_code == 400 and response.json()["error"]["field"] == "pending"


def test_approvals_are_paginated(people, asked):
    body = people.owner.get("approvals/", page_size=2).json()
    assert body["count"] == 3 and len(body["results"]) == 2 and body["next"].endswith("page=2&page_size=2")


def test_an_approval_reads_as_it_was_asked(people, asked):
    body = people.owner.get("approvals/ap-pending/").json()
    assert body == {
        "id": "ap-pending",
        "threadId": "t-1",
        "runId": "r1",
        "runUuid": str(asked.pk),
        "toolCallId": "toolu_ap-pending",
        "tool": "bash",
        "arguments": {"command": "make test"},
        "message": "Run make test?",
        "decision": "pending",
        "reason": "",
        "always": False,
        "answeredBy": "",
        "requestedAt": body["requestedAt"],
        "expiresAt": body["expiresAt"],
        "answeredAt": None,
        "latencySeconds": None,
        "elicitation": None,  # an MCP server's question has its message, schema or URL here (issue #46)
    }


def test_an_unknown_approval_is_a_404(people, asked):
    response = people.owner.get("approvals/ap-none/")
    assert response.status_code == 404 and response.json()["error"]["message"] == "no such approval"


def test_answering_an_approval_whose_run_has_ended_is_a_409_that_closes_it(people):
    """The run that asked was cancelled meanwhile: the answer would reach nobody, so it is
    refused, and the approval leaves the pending queue as cancelled. (A run that waits is held
    by no process, so its process stopping is no reason: tests/runhost/test_waiting_runs.py.)"""
    gone = world.run(world.thread("t-gone", owner=people.owner), status=Run.Status.CANCELLED)
    world.approval(gone, "ap-gone")
    response = people.owner.api.post("/api/approvals/ap-gone/answer", {"approved": True}, format="json")
    assert response.status_code == 409
    assert response.json() == {
        "error": {"code": "run_gone", "message": "the run that asked has ended: it no longer waits for this answer"}
    }
    assert Approval.objects.get(pk="ap-gone").decision == Approval.Decision.CANCELLED
    assert _ids(people.owner.get("approvals/", pending="1")) == []
