"""CopilotKit's single-route form (an app's ``useSingleEndpoint``): ``POST /copilotkit`` with a method
envelope is answered by the route it names, with that route's checks; a bad envelope is a 4xx that
says what is wrong, and nothing is stored. tests/agui/test_copilotkit_core_client.py drives it with
CopilotKit's own core."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.fakes.anthropic_api import text_turn
from tests.helpers import run_input, user, v1
from threads.models import Thread

pytestmark = pytest.mark.clients

AUTH = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}


def _call(server, envelope, headers=AUTH):
    return httpx.post(f"{server.url}/copilotkit", content=orjson.dumps(envelope), headers=headers, timeout=30)


def test_info_says_the_resources_are_reached_through_the_envelope(server):
    info = _call(server, {"method": "info"})
    assert info.status_code == 200, info.text
    assert "coder" in info.json()["agents"]
    assert info.json()["singleRoute"]["resourceOperations"] is True


def test_a_run_and_the_thread_list_through_the_envelope(server, fake_api):
    fake_api.script([text_turn(["Enveloped."])])
    body = v1(run_input("t-env", "r1", user("through one route", "u1")))
    ran = _call(server, {"method": "agent/run", "params": {"agentId": "coder"}, "body": body})
    server.drain()
    assert ran.status_code == 200 and b"Enveloped." in ran.content and b"RUN_FINISHED" in ran.content
    listed = _call(
        server, {"method": "resource/request", "params": {"path": "/threads?agentId=coder", "httpMethod": "GET"}}
    )
    assert listed.status_code == 200, listed.text
    assert [t["id"] for t in listed.json()["threads"]] == ["t-env"]
    renamed = _call(
        server,
        {
            "method": "resource/request",
            "params": {"path": "/threads/t-env", "httpMethod": "PATCH"},
            "body": {"name": "One"},
        },
    )
    assert renamed.status_code == 200, renamed.text
    assert Thread.objects.get().title == "One"


@pytest.mark.parametrize(
    ("envelope", "status", "code"),
    [
        ({"params": {}}, 400, "invalid_input"),
        ({"method": "agent/run", "params": {}}, 400, "invalid_input"),
        ({"method": "agent/stop", "params": {"agentId": "coder"}}, 400, "invalid_input"),
        ({"method": "no/such"}, 404, "unknown_method"),
        ({"method": "resource/request", "params": {"path": "/info", "httpMethod": "GET"}}, 404, "not_found"),
        ({"method": "resource/request", "params": {"path": "/threads/x/nope", "httpMethod": "GET"}}, 404, "not_found"),
        ({"method": "agent/run", "params": {"agentId": "nobody"}, "body": {}}, 400, "invalid_input"),
    ],
)
def test_a_bad_envelope_says_what_is_wrong_and_stores_nothing(server, envelope, status, code):
    refused = _call(server, envelope)
    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    assert not Thread.objects.exists()


def test_the_envelope_needs_the_token_and_is_post_only(server):
    assert _call(server, {"method": "info"}, headers={"Content-Type": "application/json"}).status_code == 401
    assert httpx.get(f"{server.url}/copilotkit", headers=AUTH).status_code == 405
    assert httpx.post(f"{server.url}/copilotkit", content=b"not json", headers=AUTH).status_code == 400
