"""Threads have owners: /agui/* takes a user's API token too, the thread it starts is theirs, and
another user's token cannot reach it (404, nothing written). The shared AGUI_TOKEN reaches every thread."""

from __future__ import annotations

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from agents.models import Agent
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import EVENT, get_stream, post_run
from threads.models import Approval, Message, Run, Thread
from threads.services.runs import ThreadNotReachable, run_open

pytestmark = pytest.mark.clients


def _person(name):
    return Token.objects.create(user=User.objects.create_user(name)).key


def _post(server, body, key, scheme="Token"):
    return httpx.post(
        f"{server.url}/agui/coder",
        content=orjson.dumps(body),
        headers={"Authorization": f"{scheme} {key}", "Content-Type": "application/json"},
        timeout=30,
    )


@pytest.mark.parametrize("scheme", ["Token", "Bearer"])
def test_a_users_token_starts_a_thread_they_own_and_sees_it_in_the_rest_api(server, fake_api, scheme):
    olive = _person("olive")
    fake_api.script([text_turn(["Hello, Olive."])])
    (result,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        "",
        [{"threadId": "t-olive", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]}],
        headers={"Authorization": f"{scheme} {olive}"},
    )
    server.drain()
    assert result["error"] is None, result["error"]
    for event in result["received"]:
        EVENT.validate_python(event)
    assert Thread.objects.get(agui_thread_id="t-olive").owner.username == "olive"
    # A user who is not staff sees their AG-UI threads in the REST API.
    listed = httpx.get(f"{server.url}/api/threads/", headers={"Authorization": f"Token {olive}"}).json()
    assert [row["threadId"] for row in listed["results"]] == ["t-olive"]
    # Their next run on it goes on as usual.
    fake_api.script([text_turn(["Again."])])
    again = _post(server, v1(run_input("t-olive", "r2", user("hi", "u1"), user("more", "u2"))), olive, scheme)
    server.drain()
    assert again.status_code == 200 and b"RUN_FINISHED" in again.content


def test_another_users_token_cannot_reach_the_thread(server, fake_api):
    olive, sam = _person("olive"), _person("sam")
    fake_api.script([text_turn(["Hello, Olive."])])
    assert _post(server, v1(run_input("t-olive", "r1", user("hi", "u1"))), olive).status_code == 200
    server.drain()
    messages, runs = Message.objects.count(), Run.objects.count()
    sam_auth = {"Authorization": f"Token {sam}"}

    # A new message, a hydrate (nothing new said), a reattach to the thread or the run, a cancel: all 404.
    for body in (
        v1(run_input("t-olive", "r-sam", user("hi", "u1"), user("let me in", "u-sam"))),
        v1(run_input("t-olive", "r-sam2", user("hi", "u1"))),
    ):
        refused = _post(server, body, sam)
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "unknown_thread"
    base = f"{server.url}/agui/coder/threads/t-olive"
    for url in (f"{base}/events", f"{base}/runs/r1/events"):
        assert httpx.get(url, headers=sam_auth).status_code == 404
    assert httpx.post(f"{base}/runs/r1/cancel", headers=sam_auth).status_code == 404
    # Nothing was written.
    assert (Message.objects.count(), Run.objects.count()) == (messages, runs)
    thread = Thread.objects.get(agui_thread_id="t-olive")
    assert thread.owner.username == "olive"
    # Nor does the REST API show it to sam.
    assert httpx.get(f"{server.url}/api/threads/t-olive/", headers=sam_auth).status_code == 404

    # The owner reattaches; the shared token (the single-user key) reaches every thread.
    assert httpx.get(f"{base}/runs/r1/events", headers={"Authorization": f"Token {olive}"}).status_code == 200
    hydrated = post_run(server.url, "coder", v1(run_input("t-olive", "r-op", user("hi", "u1"))))
    assert hydrated.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert get_stream(f"{base}/runs/r1/events").status == 200


def test_a_stranger_cannot_answer_or_see_a_waiting_thread(server, fake_api, workspace):
    olive, sam = _person("olive"), _person("sam")
    fake_api.script([tool_turn("file_write", {"path": "notes.txt", "content": "x"}, id="toolu_w")])
    asked = _post(server, v1(run_input("t-wait", "r1", user("note it", "u1"))), olive)
    assert b'"interrupt"' in asked.content
    interrupt_id = Approval.objects.get().pk
    resume = {
        **v1(run_input("t-wait", "r1")),
        "resume": [{"interruptId": interrupt_id, "status": "resolved", "payload": {"approved": True}}],
    }
    refused = _post(server, resume, sam)
    assert refused.status_code == 404
    assert Approval.objects.get().decision == Approval.Decision.PENDING
    assert not (workspace / "notes.txt").exists()


def test_a_wrong_token_is_a_401_and_an_inactive_users_too(server):
    User.objects.create_user("gone", is_active=False)
    gone = Token.objects.create(user=User.objects.get(username="gone")).key
    for key in ("not-a-token", gone):
        response = _post(server, v1(run_input("t-x", "r1", user("hi"))), key)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
    assert not Thread.objects.exists()


def test_opening_another_users_thread_is_refused_with_nothing_written(db):
    olive = User.objects.create_user("olive")
    sam = User.objects.create_user("sam")
    common = {"agent_name": "coder", "agui_thread_id": "t-race", "protocol_version": "1.0", "live_run_ids": set()}
    run_open(
        **common, agui_run_id="r1", new_user_message={"id": "u1", "role": "user", "content": "hi"}, owner_id=olive.pk
    )
    with pytest.raises(ThreadNotReachable):
        run_open(
            **common, agui_run_id="r2", new_user_message={"id": "u2", "role": "user", "content": "me"}, owner_id=sam.pk
        )
    assert list(Message.objects.values_list("message_id", flat=True)) == ["u1"]
    assert Run.objects.count() == 1 and Thread.objects.get().owner_id == olive.pk
    assert Agent.objects.filter(name="coder").exists()


def test_the_run_request_names_the_owner(db):
    from agui.decode import decode_run_input
    from agui.prompt import build_request

    body = orjson.dumps(v1(run_input("t-req", "r1", user("hi", "u1"))))
    for owner_id, expected in ((7, "7"), (None, "")):
        decoded = decode_run_input(body, owner_id=owner_id)
        assert build_request(decoded, decoded.raw["messages"][-1], request_id="r1").user_id == expected
