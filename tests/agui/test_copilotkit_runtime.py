"""CopilotKit's runtime routes served by Threadline (issue #44): /copilotkit/info, an agent's run
(the AG-UI stream, both protocol versions, through the real HttpAgent), connect (the thread's
history, and the run still going on it, joined) and stop (the run's cancel)."""

from __future__ import annotations

import threading

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.sse import EVENT, parse_frames
from threads.models import Approval, Run, Thread

pytestmark = pytest.mark.clients

AUTH = {"Authorization": "Bearer test-token"}


def _post(server, path, body, headers=AUTH, **kwargs):
    return httpx.post(
        f"{server.url}/copilotkit{path}",
        content=orjson.dumps(body) if body is not None else b"",
        headers={**headers, "Content-Type": "application/json"},
        timeout=30,
        **kwargs,
    )


def _events(response):
    assert response.status_code == 200, response.text
    frames, _ = parse_frames(response.content)
    for frame in frames:
        EVENT.validate_json(frame.raw)
    return [frame.event for frame in frames]


def test_info_lists_the_agents_and_the_thread_routes_and_no_secrets(server):
    response = httpx.get(f"{server.url}/copilotkit/info", headers=AUTH)
    assert response.status_code == 200
    info = response.json()
    assert info["mode"] == "sse"
    assert info["threadEndpoints"] == {"list": True, "inspect": True, "mutations": True, "realtimeMetadata": False}
    coder = info["agents"]["coder"]
    assert coder["name"] == "coder" and "description" in coder and coder["capabilities"]["state"]["deltas"]
    assert "licenseStatus" not in info and "intelligence" not in info
    assert b"test-token" not in response.content and b"sk-" not in response.content
    # Like every route here, it wants the caller known.
    assert httpx.get(f"{server.url}/copilotkit/info").status_code == 401


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_run_route_streams_the_agui_run_to_the_official_client(server, fake_api, version):
    fake_api.script([text_turn(["Hello ", "from CopilotKit's route."])])
    (result,) = run_client(
        version,
        f"{server.url}/copilotkit/agent/coder/run",
        "test-token",
        [{"threadId": f"t-ck-{version}", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]}],
    )
    server.drain()
    assert result["error"] is None, result["error"]
    types = [event["type"] for event in result["events"]]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert "TEXT_MESSAGE_CONTENT" in types
    assert Run.objects.get(thread__agui_thread_id=f"t-ck-{version}").status == Run.Status.SUCCEEDED


def test_connect_replays_the_thread_without_running_the_agent(server, fake_api):
    fake_api.script([text_turn(["The answer."])])
    _post(server, "/agent/coder/run", v1(run_input("t-open", "r1", user("question", "u1"))))
    server.drain()
    calls = len(fake_api.requests)
    # The page sends its own copy of the messages, a user message last: still nothing runs.
    events = _events(_post(server, "/agent/coder/connect", run_input("t-open", "c1", user("question", "u1"))))
    assert [e["type"] for e in events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert [m["role"] for m in events[1]["messages"]] == ["user", "assistant"]
    assert len(fake_api.requests) == calls and Run.objects.count() == 1


def test_connect_asks_an_open_approval_again(server, fake_api, workspace):
    fake_api.script([tool_turn("file_write", {"path": "notes.txt", "content": "x"}, id="toolu_w")])
    _post(server, "/agent/coder/run", v1(run_input("t-ask", "r1", user("note it", "u1"))))
    events = _events(_post(server, "/agent/coder/connect", v1(run_input("t-ask", "c1"))))
    assert events[-1]["type"] == "RUN_FINISHED"
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    assert interrupt["id"] == Approval.objects.get().pk


def test_connect_joins_the_run_still_going_and_shows_nothing_twice(server, fake_api):
    held = text_turn(["still ", "typing"]).pause(after_events=4, timeout=60)
    fake_api.script([held])
    started = threading.Thread(
        target=_post, args=(server, "/agent/coder/run", v1(run_input("t-live", "r1", user("go", "u1")))), daemon=True
    )
    started.start()
    assert held.paused.wait(30)
    with httpx.stream(
        "POST",
        f"{server.url}/copilotkit/agent/coder/connect",
        content=orjson.dumps(v1(run_input("t-live", "c1"))),
        headers={**AUTH, "Content-Type": "application/json"},
        timeout=30,
    ) as response:
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if b'"TEXT_MESSAGE_START"' in body:
                held.resume.set()  # the run was joined while it worked; let it end
    started.join(30)
    server.drain()
    frames, _ = parse_frames(body)
    types = [frame.event["type"] for frame in frames]
    # The thread as it stood, then the live run from its start to its end.
    assert types[:4] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert types[4] == "RUN_STARTED" and frames[4].event["runId"] == "r1"
    assert types[-1] == "RUN_FINISHED" and "TEXT_MESSAGE_END" in types
    for frame in frames:
        EVENT.validate_json(frame.raw)
    assert types.count("TEXT_MESSAGE_START") == 1


def test_stop_cancels_the_threads_run(server, fake_api):
    held = text_turn(["a long ", "answer"]).pause(after_events=4, timeout=60)
    fake_api.script([held])
    started = threading.Thread(
        target=_post, args=(server, "/agent/coder/run", v1(run_input("t-stop", "r1", user("go", "u1")))), daemon=True
    )
    started.start()
    assert held.paused.wait(30)
    assert _post(server, "/agent/coder/stop/t-stop", {"runId": "some-other-run"}).json()["stopped"] is False
    stopped = _post(server, "/agent/coder/stop/t-stop", {"runId": "r1"})
    assert stopped.status_code == 200 and stopped.json()["stopped"] is True
    held.resume.set()
    started.join(30)
    server.drain()
    eventually(lambda: Run.objects.get(agui_run_id="r1").status == Run.Status.CANCELLED, what="the cancel")
    # Nothing runs now; a thread nobody may see, or an unknown agent, is a 404.
    assert _post(server, "/agent/coder/stop/t-stop", None).json() == {
        "stopped": False,
        "message": "No active run for thread 't-stop'.",
    }
    assert _post(server, "/agent/nobody/stop/t-stop", None).status_code == 404
    stranger = Token.objects.create(user=User.objects.create_user("sam")).key
    assert _post(server, "/agent/coder/stop/t-stop", None, {"Authorization": f"Token {stranger}"}).status_code == 404
    assert _post(server, "/agent/coder/stop/t-stop", {"runId": 7}).status_code == 400
    assert Thread.objects.get().agui_thread_id == "t-stop"
