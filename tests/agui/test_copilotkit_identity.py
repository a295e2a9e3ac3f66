"""Who calls the CopilotKit routes (issue #44 item 2): a user's own API token, or their Django
session (signed in with Django's own login view, CSRF through the X-CSRFToken header), or the
shared AGUI_TOKEN as one user. Threads belong to their user; another user's is a 404."""

from __future__ import annotations

import re

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.fakes.anthropic_api import text_turn
from tests.helpers import run_input, user, v1
from threads.models import Message, Run, Thread

pytestmark = pytest.mark.clients


def _token(name):
    return Token.objects.create(user=User.objects.create_user(name, password="a long password")).key


@pytest.fixture
def clients():
    opened = []
    yield opened
    for client in opened:
        client.close()


@pytest.fixture
def signed_in(server, clients):
    return lambda name: _signed_in(server, clients, name)


def _signed_in(server, clients, name):
    """An HTTP client holding the session Django's login view gave ``name`` (and its CSRF cookie)."""
    User.objects.create_user(name, password="a long password")
    client = httpx.Client(base_url=server.url, timeout=30)
    clients.append(client)
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    form_token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content).group(1).decode()
    signed = client.post(
        "/accounts/login/",
        data={"username": name, "password": "a long password", "csrfmiddlewaretoken": form_token},
    )
    assert signed.status_code == 302, signed.text
    assert client.cookies.get("sessionid")
    return client


def _run(server, thread_id, headers, text="hi"):
    response = httpx.post(
        f"{server.url}/copilotkit/agent/coder/run",
        content=orjson.dumps(v1(run_input(thread_id, f"r-{thread_id}", user(text, f"u-{thread_id}")))),
        headers={**headers, "Content-Type": "application/json"},
        timeout=30,
    )
    server.drain()
    assert response.status_code == 200 and b"RUN_FINISHED" in response.content, response.text
    return response


def test_each_user_sees_only_their_own_threads(server, fake_api):
    olive, sam = _token("olive"), _token("sam")
    as_olive, as_sam = {"Authorization": f"Token {olive}"}, {"Authorization": f"Bearer {sam}"}
    fake_api.script([text_turn(["Hi Olive."]), text_turn(["Hi Sam."]), text_turn(["Hi, operator."])])
    _run(server, "t-olive", as_olive)
    _run(server, "t-sam", as_sam)
    _run(server, "t-shared", {"Authorization": "Bearer test-token"})

    def listed(headers):
        response = httpx.get(f"{server.url}/copilotkit/threads?agentId=coder", headers=headers)
        assert response.status_code == 200
        return [thread["id"] for thread in response.json()["threads"]]

    assert listed(as_olive) == ["t-olive"]
    assert listed(as_sam) == ["t-sam"]
    # The shared token is one user: the threads nobody owns.
    assert listed({"Authorization": "Bearer test-token"}) == ["t-shared"]
    assert Thread.objects.get(agui_thread_id="t-olive").owner.username == "olive"


def test_another_users_thread_is_a_404_on_every_route_and_nothing_changes(server, fake_api):
    olive, sam = _token("olive"), _token("sam")
    fake_api.script([text_turn(["Hi Olive."])])
    _run(server, "t-olive", {"Authorization": f"Token {olive}"})
    as_sam = {"Authorization": f"Token {sam}", "Content-Type": "application/json"}
    base = f"{server.url}/copilotkit/threads/t-olive"
    for method, url, body in (
        ("GET", f"{base}/messages", None),
        ("GET", f"{base}/events", None),
        ("GET", f"{base}/state", None),
        ("PATCH", base, {"agentId": "coder", "name": "mine now"}),
        ("DELETE", base, {"agentId": "coder"}),
        ("POST", f"{base}/archive", {"agentId": "coder"}),
        ("POST", f"{server.url}/copilotkit/agent/coder/connect", v1(run_input("t-olive", "c-sam"))),
        ("POST", f"{server.url}/copilotkit/agent/coder/run", v1(run_input("t-olive", "r2", user("in", "u-sam")))),
        ("POST", f"{server.url}/copilotkit/agent/coder/stop/t-olive", {}),
    ):
        content = orjson.dumps(body) if body is not None else None
        response = httpx.request(method, url, content=content, headers=as_sam, timeout=30)
        assert response.status_code == 404, (method, url, response.text)
    thread = Thread.objects.get(agui_thread_id="t-olive")
    assert (thread.title, thread.archived) == ("hi", False)
    assert Message.objects.filter(thread=thread).count() == 2 and Run.objects.count() == 1


def test_a_signed_in_page_calls_the_routes_with_its_session_and_csrf_header(server, fake_api, signed_in):
    fake_api.script([text_turn(["Hello, signed-in person."])])
    page = signed_in("petra")
    csrf = {"X-CSRFToken": page.cookies["csrftoken"], "Content-Type": "application/json"}
    assert page.get("/copilotkit/info").status_code == 200
    ran = page.post(
        "/copilotkit/agent/coder/run",
        content=orjson.dumps(v1(run_input("t-petra", "r1", user("hello", "u1")))),
        headers=csrf,
    )
    server.drain()
    assert ran.status_code == 200 and b"RUN_FINISHED" in ran.content
    assert Thread.objects.get(agui_thread_id="t-petra").owner.username == "petra"
    assert [t["id"] for t in page.get("/copilotkit/threads").json()["threads"]] == ["t-petra"]
    renamed = page.patch("/copilotkit/threads/t-petra", content=b'{"name": "Greetings"}', headers=csrf)
    assert renamed.status_code == 200 and renamed.json()["name"] == "Greetings"


def test_a_session_post_without_the_csrf_header_is_refused_and_stores_nothing(server, fake_api, signed_in):
    page = signed_in("petra")
    json_only = {"Content-Type": "application/json"}
    refused = page.post(
        "/copilotkit/agent/coder/run",
        content=orjson.dumps(v1(run_input("t-forged", "r1", user("do something", "u1")))),
        headers=json_only,
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
    wrong = page.post(
        "/copilotkit/agent/coder/run",
        content=orjson.dumps(v1(run_input("t-forged", "r1", user("do something", "u1")))),
        headers={**json_only, "X-CSRFToken": "x" * 32},
    )
    assert wrong.status_code == 403
    assert not Thread.objects.exists() and not fake_api.requests
    # A GET needs no CSRF token; a session that is gone is no session.
    assert page.get("/copilotkit/threads").status_code == 200
    page.post("/accounts/logout/", headers={"X-CSRFToken": page.cookies["csrftoken"]})
    assert page.get("/copilotkit/threads").status_code == 401


def test_a_token_sent_beside_a_session_decides_alone(server, signed_in):
    page = signed_in("petra")
    assert page.get("/copilotkit/threads", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_an_app_on_an_allowed_origin_may_call_the_routes_with_its_token(server, settings):
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example.com"]
    for path, method in (
        ("/copilotkit/info", "GET"),
        ("/copilotkit/threads/t-1", "PATCH"),
        ("/copilotkit/threads/t-1", "DELETE"),
    ):
        preflight = httpx.options(
            f"{server.url}{path}",
            headers={
                "Origin": "https://app.example.com",
                "Access-Control-Request-Method": method,
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert preflight.headers["access-control-allow-origin"] == "https://app.example.com", path
        assert method in preflight.headers["access-control-allow-methods"]
    other = httpx.options(
        f"{server.url}/copilotkit/info",
        headers={"Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in other.headers
