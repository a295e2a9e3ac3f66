"""Answering an approval through the REST API: the waiting run goes on and a reattaching client sees it."""

from __future__ import annotations

import time

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token

from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import get_stream, post_run
from threads.models import Approval, Run

WRITE = {"path": "notes.txt", "content": "via the API\n"}


@pytest.fixture
def staff_token(transactional_db):
    """Staff who may answer approvals: the change permission on them, as the admin requires."""
    staff = User.objects.create_user("ops", password="a-long-password", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="change_approval"))
    return Token.objects.create(user=staff).key


@pytest.fixture
def reader_token(transactional_db):
    """Staff without permissions: they read every thread, and change none."""
    staff = User.objects.create_user("reader", password="a-long-password", is_staff=True)
    return Token.objects.create(user=staff).key


@pytest.fixture
def stranger_token(transactional_db):
    return Token.objects.create(user=User.objects.create_user("stranger", password="a-long-password")).key


def _api(server, method, path, token=None, **kwargs):
    headers = {"Authorization": f"Token {token}"} if token else {}
    return httpx.request(method, f"{server.url}/api/{path}", headers=headers, timeout=10, **kwargs)


@pytest.fixture
def pending(server, fake_api):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_api"), text_turn(["Written."])])
    asked = post_run(server.url, "coder", v1(run_input("t-api", "r1", user("note it"))))
    return asked.events[-1]["outcome"]["interrupts"][0]["id"]


def test_an_answer_through_the_api_continues_the_run(server, workspace, pending, staff_token):
    listed = _api(server, "GET", "approvals/?pending=1", staff_token)
    assert listed.status_code == 200
    [row] = listed.json()["results"]
    assert row["id"] == pending and row["threadId"] == "t-api" and row["tool"] == "file_write"

    answered = _api(server, "POST", f"approvals/{pending}/answer", staff_token, json={"approved": True})
    assert answered.status_code == 200
    assert answered.json()["decision"] == "approved" and answered.json()["answeredBy"] == "ops"
    for _ in range(100):
        if Run.objects.filter(thread__agui_thread_id="t-api", agui_run_id="r1-continued").exists():
            break
        time.sleep(0.05)
    follow = get_stream(f"{server.url}/agui/coder/threads/t-api/events")
    assert follow.types[0] == "RUN_STARTED" and follow.types[-1] == "RUN_FINISHED"
    server.drain()
    assert (workspace / "notes.txt").read_text() == "via the API\n"

    again = _api(server, "POST", f"approvals/{pending}/answer", staff_token, json={"approved": False})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "already_answered"


def test_bad_answers_and_strangers_are_refused(server, pending, staff_token, stranger_token):
    assert _api(server, "POST", f"approvals/{pending}/answer", json={"approved": True}).status_code == 401
    hidden = _api(server, "POST", f"approvals/{pending}/answer", stranger_token, json={"approved": True})
    assert hidden.status_code == 404
    bad = _api(server, "POST", f"approvals/{pending}/answer", staff_token, json={"approved": "perhaps"})
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "approved"
    missing = _api(server, "POST", "approvals/nope/answer", staff_token, json={"approved": True})
    assert missing.status_code == 404 and missing.json()["error"]["message"] == "no such approval"
    assert Approval.objects.get().decision == Approval.Decision.PENDING
    assert _api(server, "GET", "approvals/", stranger_token).json()["results"] == []


def test_staff_without_the_permission_cannot_make_the_run_go_on(server, workspace, pending, reader_token):
    assert _api(server, "GET", f"approvals/{pending}/", reader_token).status_code == 200
    refused = _api(server, "POST", f"approvals/{pending}/answer", reader_token, json={"approved": True})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    # Unanswered, the run waits on (till its deadline, minutes away): no sweep may take it on.
    approval = Approval.objects.get()
    assert approval.decision == Approval.Decision.PENDING and approval.answered_by == ""
    assert not Run.objects.filter(agui_run_id="r1-continued").exists()
    assert not (workspace / "notes.txt").exists()
