"""/agui/info, SSE heartbeats, and what never leaves the server."""

from __future__ import annotations

import httpx
import orjson
from django.test import override_settings

from tests.fakes.anthropic_api import text_turn
from tests.helpers import run_input, user, v1
from tests.sse import parse_frames


def test_info_describes_agents_and_capabilities_without_secrets(server, fake_api):
    response = httpx.get(f"{server.url}/agui/info", headers={"Authorization": "Bearer test-token"})
    assert response.status_code == 200
    info = response.json()
    # The seed's InfoResponse: protocol, version and the route prefix.
    assert (info["protocol"], info["version"], info["path"]) == ("ag-ui", "1.0", "/agui")
    (agent,) = info["agents"]
    assert agent["name"] == "coder"
    assert agent["url"] == f"{server.url}/agui/coder"
    assert agent["model"] == {
        "id": "claude-sonnet-5-5",
        "name": "claude-sonnet-5-5",
        "provider": "anthropic",
        "contextWindow": 200000,
    }
    assert info["capabilities"]["reattach"] is True
    assert info["capabilities"]["reasoning"] is True
    assert "sk-test-fake" not in response.text
    assert fake_api.base_url not in response.text
    assert "test-token" not in response.text


def test_info_labels_the_offline_demo_model(server):
    info = httpx.get(f"{server.url}/agui/info", headers={"Authorization": "Bearer test-token"}).json()
    assert info["agents"][0]["model"]["offlineDemo"] is True
    assert info["agents"][0]["model"]["provider"] == "threadline-demo"


def test_silence_gets_heartbeats_and_frames_carry_ids(server, fake_api):
    slow = text_turn(["after ", "a pause"]).pause(after_events=3)
    fake_api.script([slow])
    with (
        override_settings(AGUI_HEARTBEAT_SECONDS=0.05),
        httpx.stream(
            "POST",
            f"{server.url}/agui/coder",
            content=orjson.dumps(v1(run_input("t-hb", "r1", user("hi")))),
            headers={"Authorization": "Bearer test-token", "Content-Type": "application/json"},
            timeout=10,
        ) as response,
    ):
        body = bytearray()
        for chunk in response.iter_raw():
            body += chunk
            if body.count(b": ping") >= 3:
                slow.resume.set()
    frames, comments = parse_frames(bytes(body))
    assert comments.count("ping") >= 3
    assert [f.id for f in frames] == list(range(1, len(frames) + 1))
    assert frames[-1].event["type"] == "RUN_FINISHED"


def test_the_api_key_never_reaches_the_stream_or_the_log(server, fake_api):
    from threads.models import EventFrame
    from threads.selectors import run_events_after

    fake_api.script([text_turn(["ok"])])
    response = httpx.post(
        f"{server.url}/agui/coder",
        content=orjson.dumps(v1(run_input("t-sec", "r1", user("hi")))),
        headers={"Authorization": "Bearer test-token", "Content-Type": "application/json"},
        timeout=10,
    )
    server.drain()
    assert b"sk-test-fake" not in response.content
    logged = [e.payload for frame in EventFrame.objects.all() for e in run_events_after(run=frame.run_id, after=0)]
    assert logged and not any("sk-test-fake" in payload for payload in logged)
