"""Bad requests get a clear 4xx JSON error, and nothing is written."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.helpers import run_input, user
from threads.models import EventFrame, Message, Run, Thread

GOOD = run_input("t-bad", "r1", user("hi"))


def _post(server, body: bytes | dict, *, headers: dict | None = None, agent: str = "coder") -> httpx.Response:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    all_headers = {"Authorization": "Bearer test-token", "Content-Type": "application/json", **(headers or {})}
    return httpx.post(f"{server.url}/agui/{agent}", content=content, headers=all_headers, timeout=10)


def _assert_nothing_written() -> None:
    assert Thread.objects.count() == 0
    assert Run.objects.count() == 0
    assert Message.objects.count() == 0
    assert EventFrame.objects.count() == 0


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"Authorization": ""}, "send the AG-UI token"),
        ({"Authorization": "Bearer wrong"}, "token is wrong"),
        ({"Authorization": "Basic dGVzdA=="}, "send the AG-UI token"),
        ({"Authorization": "Bearer"}, "send the AG-UI token"),
    ],
)
def test_it_rejects_a_missing_or_wrong_token(server, headers, message):
    response = _post(server, GOOD, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert message in response.json()["error"]["message"]
    _assert_nothing_written()


def test_info_and_reattach_need_the_token_too(server):
    assert httpx.get(f"{server.url}/agui/info").status_code == 401
    assert httpx.get(f"{server.url}/agui/coder/threads/t/events").status_code == 401


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"", None, "empty"),
        (b"[1, 2]", None, "must be a JSON object"),
        ({"runId": "r", "messages": []}, "threadId", "threadId is required"),
        ({"threadId": "t", "messages": []}, "runId", "runId is required"),
        ({"threadId": "t", "runId": "r"}, "messages", "messages is required"),
        ({"threadId": 5, "runId": "r", "messages": []}, "threadId", "non-empty string"),
        ({"threadId": "t", "runId": "", "messages": []}, "runId", "non-empty string"),
        ({"threadId": "t", "runId": "r", "messages": {}}, "messages", "array"),
        ({"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "user"}]}, "messages.0.content", "required"),
        (
            {"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "wizard", "content": "x"}]},
            "messages.0",
            "",
        ),
        ({"threadId": "t", "runId": "r", "messages": [], "tools": "nope"}, "tools", ""),
        ({"threadId": "t", "runId": "r", "messages": [], "context": [{"value": "v"}]}, "context.0.description", ""),
        (
            {
                "threadId": "t",
                "runId": "r",
                "messages": [{"id": "m", "role": "user", "content": [{"type": "binary", "data": "aGk="}]}],
            },
            "messages.0.content.mimeType",
            "mimeType",
        ),
        (
            {"threadId": "t", "runId": "r", "messages": [user("a", "same"), user("b", "same")]},
            "messages",
            "share an id",
        ),
        (
            {"threadId": "t", "runId": "r", "messages": [], "protocolVersion": "1.0." + "0" * 13},
            "protocolVersion",
            "longer than 16 characters",
        ),
    ],
)
def test_it_rejects_malformed_input_naming_the_field(server, body, field, fragment):
    response = _post(server, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert fragment in error["message"]
    if field:
        assert error["field"] == field
    _assert_nothing_written()


def test_it_rejects_an_unknown_agent(server):
    response = _post(server, GOOD, agent="nobody")
    assert response.status_code == 404
    assert "nobody" in response.json()["error"]["message"]
    _assert_nothing_written()


def test_it_rejects_a_disabled_agent(server, coder):
    def listed() -> list[str]:
        info = httpx.get(f"{server.url}/agui/info", headers={"Authorization": "Bearer test-token"}, timeout=10)
        return [agent["name"] for agent in info.json()["agents"]]

    assert listed() == ["coder"]  # the set of enabled agents is read, and kept for a few seconds
    coder.enabled = False
    coder.save()  # which forgets it in this process at once (another process re-reads it in seconds)
    assert _post(server, GOOD).status_code == 404
    assert listed() == []
    _assert_nothing_written()


def test_an_agent_disabled_a_moment_ago_runs_nothing(server, coder):
    from tests.sse import post_run

    assert post_run(server.url, "coder", run_input("t-warm", "r0", user("warm the cache"))).status == 200
    server.drain()
    # Disabled as another process's admin would: no signal here, so this process's set is stale.
    type(coder).objects.filter(pk=coder.pk).update(enabled=False)
    stream = post_run(server.url, "coder", GOOD)
    assert stream.types == ["RUN_STARTED", "RUN_ERROR"]
    assert stream.events[1]["code"] == "unknown_agent"
    assert "no agent named 'coder'" in stream.events[1]["message"]
    assert not Thread.objects.filter(agui_thread_id="t-bad").exists()


def test_it_refuses_a_body_over_the_cap(server):
    big = orjson.dumps(run_input("t-big", "r1", user("x" * (8 * 1024 * 1024 + 10))))
    response = _post(server, big)
    assert response.status_code == 413
    assert "limit" in response.json()["error"]["message"]

    def chunks():  # no Content-Length: the cap still holds
        for i in range(0, len(big), 1 << 20):
            yield big[i : i + (1 << 20)]

    response = httpx.post(
        f"{server.url}/agui/coder",
        content=chunks(),
        headers={"Authorization": "Bearer test-token", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 413
    _assert_nothing_written()


def test_get_is_not_a_run(server):
    response = httpx.get(f"{server.url}/agui/coder", headers={"Authorization": "Bearer test-token"})
    assert response.status_code == 405
    _assert_nothing_written()


def test_every_agui_route_checks_its_method_before_the_token(server):
    """One decorator (agui/http.py, @agui_endpoint) makes the same checks on every AG-UI view."""
    wrong = {
        ("POST", "/agui/info"): "GET this URL",
        ("GET", "/agui/coder/threads/t/runs/r/cancel"): "POST to this URL",
        ("POST", "/agui/coder/threads/t/events"): "GET this URL",
    }
    for (method, path), hint in wrong.items():
        response = httpx.request(method, f"{server.url}{path}")  # no token: the method is refused first
        assert response.status_code == 405, path
        assert response.json()["error"]["code"] == "method_not_allowed"
        assert response.json()["error"]["message"].startswith(hint)
    assert httpx.get(f"{server.url}/agui/info").status_code == 401
    _assert_nothing_written()


# Conflicts only the database can see are found after RUN_STARTED has gone out
# (the first byte does not wait on the database), so they end the stream with
# RUN_ERROR: the form in which CopilotKit shows a server's error to the user.


def test_a_reused_run_id_ends_the_stream_with_a_conflict_and_writes_nothing(server):
    from tests.sse import post_run

    assert post_run(server.url, "coder", GOOD).status == 200
    server.drain()
    again = post_run(server.url, "coder", run_input("t-bad", "r1", user("hi", GOOD["messages"][0]["id"]), user("more")))
    assert again.status == 200
    assert again.types == ["RUN_STARTED", "RUN_ERROR"]
    assert again.events[1]["code"] == "conflict"
    assert "already exists" in again.events[1]["message"]
    server.drain()
    assert Run.objects.count() == 1
    assert Message.objects.filter(body__content="more").count() == 0


def test_a_thread_of_another_agent_is_a_conflict(server):
    from agents.models import Agent
    from tests.sse import post_run

    Agent.objects.create(name="other")
    assert post_run(server.url, "other", GOOD).status == 200
    server.drain()
    refused = post_run(server.url, "coder", run_input("t-bad", "r2", user("hi again")))
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"]
    assert "belongs to agent 'other'" in refused.events[1]["message"]
    server.drain()
    assert Run.objects.count() == 1


class TestCors:
    def test_an_allowed_origin_gets_cors_headers(self, server, settings):
        settings.CORS_ALLOWED_ORIGINS = ["https://app.example.com"]
        response = httpx.options(
            f"{server.url}/agui/coder",
            headers={
                "Origin": "https://app.example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "authorization" in response.headers["access-control-allow-headers"]

    def test_any_other_origin_gets_none(self, server, settings):
        settings.CORS_ALLOWED_ORIGINS = ["https://app.example.com"]
        for origin in ("https://evil.example.com", "https://app.example.com.evil.com", "http://app.example.com"):
            response = httpx.options(
                f"{server.url}/agui/coder",
                headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
            )
            assert "access-control-allow-origin" not in response.headers
