"""Frontend tools through @ag-ui/client 1.0.0 and 0.0.59: the client runs them, the agent run waits and
goes on with their results."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.agui_client import run_client
from tests.api_world import person
from tests.fakes.anthropic_api import text_turn, tool_turn, tool_use, turn
from tests.helpers import eventually, run_input, user, v1
from tests.sse import EVENT, post_run
from threads import selectors
from threads.models import Thread

pytestmark = pytest.mark.clients
VERSIONS = ["1", "0"]
BACKGROUND = {
    "name": "change_background",
    "description": "Change the page's background colour.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}


def _normal(message):
    calls = [(c["id"], c["function"]["name"]) for c in message.get("toolCalls") or []]
    return (message["id"], message["role"], message.get("content") or None, calls, message.get("toolCallId"))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_frontend_tool_round_trip(server, fake_api, version):
    fake_api.script(
        [
            tool_turn("change_background", {"color": "blue"}, id="toolu_bg"),
            text_turn(["The background is blue now."]),
        ]
    )
    thread_id = f"t-front-{version}"
    called, answered = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": thread_id,
                "runId": "r1",
                "tools": [BACKGROUND],
                "messages": [{"id": "u1", "role": "user", "content": "make it blue"}],
            },
            {
                "runId": "r2",
                "tools": [BACKGROUND],
                "append": [
                    {"id": "tr1", "role": "tool", "toolCallId": "toolu_bg", "content": "background set to blue"}
                ],
            },
        ],
    )
    server.drain()
    assert called["error"] is None and answered["error"] is None
    for result in (called, answered):
        for event in result["received"]:
            EVENT.validate_python(event)
    types = [e["type"] for e in called["received"]]
    assert "TOOL_CALL_END" in types and "TOOL_CALL_RESULT" not in types
    finished = called["received"][-1]
    if version == "1":
        assert finished["outcome"] == {"type": "success", "pendingToolCallIds": ["toolu_bg"]}
    else:
        assert "outcome" not in finished
    assert [t["name"] for t in fake_api.requests[0].body["tools"]][-1] == "change_background"
    told = fake_api.requests[1].body["messages"][-1]["content"][0]
    assert told == {
        "type": "tool_result",
        "tool_use_id": "toolu_bg",
        "content": "background set to blue",
        "cache_control": {"type": "ephemeral"},  # the end of the conversation, for the next call (#48)
    }
    assert [e["type"] for e in answered["received"]][-1] == "RUN_FINISHED"
    # The transcript the client built is the server's, the client's tool message included.
    server_side = selectors.thread_transcript(thread=Thread.objects.get(agui_thread_id=thread_id))
    client_side = [m for m in answered["messages"] if m["role"] != "reasoning"]
    assert [_normal(m) for m in client_side] == [_normal(m) for m in server_side]


@pytest.mark.parametrize("version", VERSIONS)
def test_parallel_frontend_calls_and_a_mixed_turn(server, fake_api, version):
    fake_api.script(
        [
            turn(
                tool_use("glob", {"pattern": "*.md"}, id="toolu_glob"),
                tool_use("change_background", {"color": "red"}, id="toolu_a"),
                tool_use("change_background", {"color": "green"}, id="toolu_b"),
            ),
            text_turn(["All three done."]),
        ]
    )
    called, answered = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": f"t-front-par-{version}",
                "runId": "r1",
                "tools": [BACKGROUND],
                "messages": [{"id": "u1", "role": "user", "content": "two colours and a listing"}],
            },
            {
                "runId": "r2",
                "tools": [BACKGROUND],
                "append": [
                    {"id": "tr-a", "role": "tool", "toolCallId": "toolu_a", "content": "red"},
                    {"id": "tr-b", "role": "tool", "toolCallId": "toolu_b", "content": "green"},
                ],
            },
        ],
    )
    server.drain()
    assert called["error"] is None and answered["error"] is None
    if version == "1":
        assert sorted(called["received"][-1]["outcome"]["pendingToolCallIds"]) == ["toolu_a", "toolu_b"]
    results = {b["tool_use_id"]: b["content"] for b in fake_api.requests[1].body["messages"][-1]["content"]}
    assert results["toolu_a"] == "red" and results["toolu_b"] == "green" and "README.md" in results["toolu_glob"]


def test_a_frontend_call_nobody_answers_times_out_into_an_error_the_model_reads(server, fake_api):
    fake_api.script([tool_turn("change_background", {"color": "blue"}, id="toolu_bg"), text_turn(["I could not."])])
    with override_settings(FRONTEND_TOOL_TIMEOUT_SECONDS=0.3):
        called = post_run(server.url, "coder", v1(run_input("t-front-late", "r1", user("blue"), tools=[BACKGROUND])))
        assert called.events[-1]["outcome"]["pendingToolCallIds"] == ["toolu_bg"]
    # No process waits on the deadline: the sweep finds it passed and goes on with the run.
    eventually(lambda: len(fake_api.requests) == 2, what="the expired call going on")
    server.drain()
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["is_error"] and "did not run this tool in time" in told["content"]


def test_the_frontend_tool_set_can_change_between_requests(server, fake_api):
    other = {"name": "show_chart", "description": "Render a chart.", "parameters": {"type": "object"}}
    fake_api.script([tool_turn("change_background", {"color": "blue"}, id="toolu_bg"), text_turn(["ok"])])
    post_run(server.url, "coder", v1(run_input("t-front-set", "r1", user("blue", "u1"), tools=[BACKGROUND])))
    post_run(
        server.url,
        "coder",
        v1(
            {
                **run_input("t-front-set", "r2", user("blue", "u1")),
                "messages": [
                    user("blue", "u1"),
                    {
                        "id": "a1",
                        "role": "assistant",
                        "toolCalls": [
                            {
                                "id": "toolu_bg",
                                "type": "function",
                                "function": {"name": "change_background", "arguments": "{}"},
                            }
                        ],
                    },
                    {"id": "tr1", "role": "tool", "toolCallId": "toolu_bg", "content": "done"},
                ],
                "tools": [other],
            }
        ),
    )
    offered = [t["name"] for t in fake_api.requests[1].body["tools"]]
    assert "show_chart" in offered and "change_background" not in offered


def test_a_0x_client_reloading_a_thread_a_1x_client_left_waiting_gets_what_its_schema_accepts(server, fake_api):
    fake_api.script([tool_turn("change_background", {"color": "blue"}, id="toolu_bg")])
    (called,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": "t-front-mixed-versions",
                "runId": "r1",
                "tools": [BACKGROUND],
                "messages": [{"id": "u1", "role": "user", "content": "blue"}],
            },
        ],
    )
    assert called["received"][-1]["outcome"] == {"type": "success", "pendingToolCallIds": ["toolu_bg"]}
    (reloaded,) = run_client(
        "0",
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": "t-front-mixed-versions", "runId": "r-reload", "messages": []},
        ],
    )
    assert reloaded["error"] is None
    assert [e["type"] for e in reloaded["received"]] == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "STATE_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert "outcome" not in reloaded["received"][-1]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_browser_tool_that_failed_reaches_the_model_as_a_failed_result(server, fake_api, version):
    fake_api.script(
        [
            tool_turn("change_background", {"color": "plaid"}, id="toolu_bg"),
            text_turn(["The page could not show plaid."]),
        ]
    )
    thread_id = f"t-front-failed-{version}"
    failed = {
        "id": "tr-failed",
        "role": "tool",
        "toolCallId": "toolu_bg",
        "content": "",
        "error": "plaid is not a colour the page knows",
    }
    called, answered = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": thread_id,
                "runId": "r1",
                "tools": [BACKGROUND],
                "messages": [{"id": "u1", "role": "user", "content": "make it plaid"}],
            },
            {"runId": "r2", "tools": [BACKGROUND], "append": [failed]},
        ],
    )
    server.drain()
    assert called["error"] is None and answered["error"] is None
    # What the model was sent, as the SDK put it on the wire: a failed result, the error its content.
    told = fake_api.requests[1].body["messages"][-1]["content"]
    assert told == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_bg",
            "content": "plaid is not a colour the page knows",
            "is_error": True,
            "cache_control": {"type": "ephemeral"},
        }
    ]
    # The transcript keeps the client's message as it was sent, its error included, and so does the API.
    thread = Thread.objects.get(agui_thread_id=thread_id)
    kept = [m for m in selectors.thread_transcript(thread=thread) if m["role"] == "tool"]
    assert kept == [failed]
    staff = person("ops", staff=True)
    assert [m for m in staff.get(f"threads/{thread_id}/").json()["messages"] if m["role"] == "tool"] == [failed]
    # A client that reloads the thread gets the error back in its snapshot, and its schema takes it.
    (reloaded,) = run_client(
        version, f"{server.url}/agui/coder", "test-token", [{"threadId": thread_id, "runId": "r3", "messages": []}]
    )
    assert reloaded["error"] is None
    snapshot = next(e for e in reloaded["received"] if e["type"] == "MESSAGES_SNAPSHOT")
    assert [m for m in snapshot["messages"] if m["role"] == "tool"] == [failed]
