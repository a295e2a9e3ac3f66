"""The deployment switches of the AG-UI adapter: AGUI_HUMAN_IN_THE_LOOP and AGUI_FRONTEND_TOOLS."""

from __future__ import annotations

import httpx
import pytest
from django.test import override_settings

from agents.models import PermissionRule
from tests.agui_client import run_client
from tests.eventlogs import logged
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.sse import EVENT
from threads import selectors
from threads.models import Approval, Run, Thread

pytestmark = pytest.mark.clients
WRITE = {"path": "notes.txt", "content": "remember the milk\n"}
BACKGROUND = {
    "name": "change_background",
    "description": "Change the page's background colour.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}


def _run(server, version, thread_id, **extra):
    body = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}
    (result,) = run_client(version, f"{server.url}/agui/coder", "test-token", [{**body, **extra}])
    server.drain()
    assert result["error"] is None, result["error"]
    for event in result["received"]:
        EVENT.validate_python(event)
    return result


@pytest.mark.parametrize("version", ["1", "0"])
def test_with_human_in_the_loop_off_a_call_that_would_ask_is_denied_and_the_model_told(
    server, fake_api, workspace, version
):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["I could not write it."])])
    with override_settings(AGUI_HUMAN_IN_THE_LOOP=False):
        result = _run(server, version, f"t-nohitl-{version}")
    finished = result["received"][-1]
    assert finished["type"] == "RUN_FINISHED" and finished.get("outcome", {"type": "success"}) == {"type": "success"}
    assert not (workspace / "notes.txt").exists()
    # The model reads why, and the refusal is kept where every call's result is: the event log and transcript.
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_write" and told["is_error"]
    assert "human in the loop is off" in told["content"] and "asks" in told["content"]
    result_event = next(e for e in result["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert "human in the loop is off" in result_event["content"]
    thread = Thread.objects.get(agui_thread_id=f"t-nohitl-{version}")
    (stored,) = [
        e.payload for r in Run.objects.filter(thread=thread) for e in logged(r) if e.type == "TOOL_CALL_RESULT"
    ]
    assert "human in the loop is off" in str(stored)
    transcript = selectors.thread_transcript(thread=thread)
    assert any(m["role"] == "tool" and "human in the loop is off" in m["content"] for m in transcript)
    # Nobody was asked, so there is no approval to answer.
    assert not Approval.objects.exists()
    # Nor is the agent offered a question nobody would answer.
    assert "ask_user" not in [t["name"] for t in fake_api.requests[0].body["tools"]]


def test_with_human_in_the_loop_off_an_allow_rule_still_runs_and_info_says_so(server, fake_api, workspace):
    PermissionRule.objects.create(position=10, tool="file_write", match="notes*", decision="allow")
    fake_api.script([tool_turn("file_write", WRITE), text_turn(["Noted."])])
    with override_settings(AGUI_HUMAN_IN_THE_LOOP=False):
        _run(server, "1", "t-nohitl-allow")
        info = httpx.get(f"{server.url}/agui/info", headers={"Authorization": "Bearer test-token"}).json()
    assert (workspace / "notes.txt").read_text() == WRITE["content"]
    assert info["capabilities"]["humanInTheLoop"] is False and info["capabilities"]["frontendTools"] is True


@pytest.mark.parametrize("version", ["1", "0"])
def test_with_frontend_tools_off_the_clients_tools_are_ignored(server, fake_api, version):
    # The model calls the client's tool anyway (a stale plan, say): it is told the tool does not exist.
    fake_api.script([tool_turn("change_background", {"color": "blue"}, id="toolu_bg"), text_turn(["I cannot."])])
    with override_settings(AGUI_FRONTEND_TOOLS=False):
        result = _run(server, version, f"t-nofront-{version}", tools=[BACKGROUND])
        info = httpx.get(f"{server.url}/agui/info", headers={"Authorization": "Bearer test-token"}).json()
    assert "change_background" not in [t["name"] for t in fake_api.requests[0].body["tools"]]
    finished = result["received"][-1]
    assert finished["type"] == "RUN_FINISHED" and "pendingToolCallIds" not in finished.get("outcome", {})
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["is_error"] and "unknown tool" in told["content"]
    assert info["capabilities"]["frontendTools"] is False
