"""Sub-agents: the sub_agent tool, its limits, its events and its board, through the endpoint."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import override_settings

from tests.agui_client import run_client
from tests.fakes.anthropic_api import http_error, text_turn, tool_turn, tool_use, turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Message, Run, SubAgentTask, Thread


def _tool_results(request: Any) -> dict[str, dict[str, Any]]:
    content = request.body["messages"][-1]["content"]
    return {block["tool_use_id"]: block for block in content if block.get("type") == "tool_result"}


def _requests_for(fake: Any, marker: str) -> list[Any]:
    return [r for r in fake.requests if marker in json.dumps(r.body["messages"][0]["content"])]


def test_a_parent_delegates_two_children_and_one_fails(server, fake_api, workspace):
    fake_api.script(
        [
            turn(
                tool_use(
                    "sub_agent",
                    {"task": "CHILD-A: read src/app.py and say what main returns", "role": "reader"},
                    id="toolu_a",
                ),
                tool_use(
                    "sub_agent",
                    {"task": "CHILD-B: look around", "role": "breaker", "allowed_tools": ["glob"]},
                    id="toolu_b",
                ),
            ),
            text_turn(["Both reported."]),
        ]
    )
    fake_api.script_for(
        "CHILD-A",
        [
            tool_turn("file_read", {"path": "src/app.py"}, id="toolu_a1"),
            text_turn(["main returns 'hello'."], input_tokens=40),
        ],
    )
    fake_api.script_for("CHILD-B", [http_error(400, "invalid_request_error", "the child's model broke")])

    stream = post_run(server.url, "coder", v1(run_input("t-sub-two", "r1", user("delegate"))))
    server.drain()

    events = stream.events
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "success"}
    started = [e for e in events if e["type"] == "SUBAGENT_STARTED"]
    assert {e["name"] for e in started} == {"reader", "breaker"}
    ids = {e["name"]: e["subagentRunId"] for e in started}
    assert {e["parentToolCallId"] for e in started} == {"toolu_a", "toolu_b"}
    finished = next(e for e in events if e["type"] == "SUBAGENT_FINISHED")
    assert finished["subagentRunId"] == ids["reader"] and finished["result"] == "main returns 'hello'."
    error = next(e for e in events if e["type"] == "SUBAGENT_ERROR")
    assert error["subagentRunId"] == ids["breaker"] and error["code"] == "failed"
    # The child's own stream is tagged with its id; the parent's is not.
    child_read = next(e for e in events if e["type"] == "TOOL_CALL_START" and e["toolCallId"] == "toolu_a1")
    assert child_read["subagentRunId"] == ids["reader"]
    parent_call = next(e for e in events if e["type"] == "TOOL_CALL_START" and e["toolCallId"] == "toolu_a")
    assert "subagentRunId" not in parent_call

    # Only the summary goes back to the parent's model, with how the child ended.
    results = _tool_results(fake_api.requests[-1])
    assert results["toolu_a"]["content"].startswith("main returns 'hello'.")
    assert "completed" in results["toolu_a"]["content"] and "is_error" not in results["toolu_a"]
    assert "def main" not in results["toolu_a"]["content"]  # the file the child read stays with the child
    assert results["toolu_b"]["is_error"] is True and "the child's model broke" in results["toolu_b"]["content"]
    # The child works with only the tools it was given, and none a child may never have.
    (b_request,) = _requests_for(fake_api, "CHILD-B")
    assert [t["name"] for t in b_request.body["tools"]] == ["glob"]
    a_tools = {t["name"] for t in _requests_for(fake_api, "CHILD-A")[0].body["tools"]}
    assert "file_read" in a_tools and "sub_agent" in a_tools  # depth 1 may delegate once more
    assert not a_tools & {"ask_user", "todo_write", "grounding_report"}

    thread = Thread.objects.get(agui_thread_id="t-sub-two")
    tasks = {t.role: t for t in SubAgentTask.objects.filter(thread=thread)}
    assert tasks["reader"].status == "succeeded" and tasks["breaker"].status == "failed"
    assert tasks["reader"].tool_calls == [
        {"id": "toolu_a1", "name": "file_read", "arguments": '{"path": "src/app.py"}', "isError": False, "ended": True}
    ]
    assert tasks["reader"].summary == "main returns 'hello'." and tasks["reader"].depth == 1
    assert tasks["reader"].input_tokens == 25 + 40
    assert "the child's model broke" in tasks["breaker"].error
    # The child's messages are in the transcript, marked as its own.
    child_messages = Message.objects.filter(thread=thread, body__subagentRunId=ids["reader"])
    assert [m.role for m in child_messages.order_by("position")] == ["assistant", "tool", "assistant"]

    # The board, for every client, and the usage rolled up into the parent's.
    board = {entry["role"]: entry for entry in thread.state["subAgents"]}
    assert board["reader"]["status"] == "succeeded" and board["reader"]["summary"] == "main returns 'hello'."
    assert board["breaker"]["status"] == "failed" and board["breaker"]["error"]
    run = Run.objects.get(thread=thread)
    # The parent's two calls (25 each), the reader's two (25 and 40); the breaker's call failed.
    assert run.input_tokens == 25 + 25 + 25 + 40 == thread.state["tokenUsage"]["totalPromptTokens"]


def test_the_depth_cap_is_a_structured_error(server, fake_api):
    nested = {"task": "LEVEL-TWO: go deeper"}
    fake_api.script([tool_turn("sub_agent", {"task": "LEVEL-ONE: delegate again"}, id="toolu_c"), text_turn(["ok"])])
    fake_api.script_for("LEVEL-ONE", [tool_turn("sub_agent", nested, id="toolu_gc"), text_turn(["child done"])])
    fake_api.script_for(
        "LEVEL-TWO", [tool_turn("sub_agent", {"task": "too deep"}, id="toolu_ggc"), text_turn(["grandchild done"])]
    )
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        stream = post_run(server.url, "coder", v1(run_input("t-sub-deep", "r1", user("delegate deeply"))))
    server.drain()
    assert stream.events[-1]["type"] == "RUN_FINISHED"
    (grandchild_request, _) = _requests_for(fake_api, "LEVEL-TWO")
    # At the cap the tool is not offered, and a call anyway is refused with a structured error.
    assert "sub_agent" not in {t["name"] for t in grandchild_request.body["tools"]}
    refusal = _tool_results(_requests_for(fake_api, "LEVEL-TWO")[1])["toolu_ggc"]
    assert refusal["is_error"] is True
    assert json.loads(refusal["content"]) == {
        "error": "max_depth",
        "message": "sub-agents may be nested at most 2 deep; do this task yourself",
        "depth": 3,
        "maxDepth": 2,
    }
    tasks = SubAgentTask.objects.filter(thread__agui_thread_id="t-sub-deep").order_by("depth")
    assert [(t.depth, t.status) for t in tasks] == [(1, "succeeded"), (2, "succeeded")]
    assert tasks[1].parent_task_id == tasks[0].id
    # Each counts its own model calls; the child's tokens include none of the grandchild's,
    # while the run's include all three conversations'.
    assert [t.iterations for t in tasks] == [2, 2]
    assert [t.input_tokens for t in tasks] == [50, 50]
    assert Run.objects.get(thread__agui_thread_id="t-sub-deep").input_tokens == 6 * 25
    nested_start = [e for e in stream.events if e["type"] == "SUBAGENT_STARTED"][1]
    assert nested_start["parentSubagentRunId"] == tasks[0].id
    # The child's record keeps its grandchild's calls under the sub_agent call that started it.
    (delegation,) = tasks[0].tool_calls
    assert (delegation["id"], delegation["name"], delegation["ended"]) == ("toolu_gc", "sub_agent", True)
    assert delegation["calls"] == [
        {
            "id": "toolu_ggc",
            "name": "sub_agent",
            "arguments": json.dumps({"task": "too deep"}),
            "isError": True,
            "ended": True,
        }
    ]
    assert tasks[1].tool_calls == delegation["calls"]


def test_bad_arguments_are_refused_and_unknown_tools_skipped(server, fake_api):
    allowed = ["glob", "nope", "ask_user"]
    fake_api.script(
        [
            turn(
                tool_use("sub_agent", {"task": ""}, id="toolu_empty"),
                tool_use("sub_agent", {"task": "SKIPPER: look", "allowed_tools": allowed}, id="toolu_skip"),
            ),
            text_turn(["ok"]),
        ]
    )
    fake_api.script_for("SKIPPER", [text_turn(["looked"])])
    post_run(server.url, "coder", v1(run_input("t-sub-bad", "r1", user("delegate badly"))))
    server.drain()
    results = _tool_results(fake_api.requests[-1])
    assert json.loads(results["toolu_empty"]["content"])["error"] == "invalid_arguments"
    # A name the child cannot have is skipped, not refused, and the summary line names it.
    (child_request,) = _requests_for(fake_api, "SKIPPER")
    assert [t["name"] for t in child_request.body["tools"]] == ["glob"]
    skipped = results["toolu_skip"]
    assert "is_error" not in skipped and skipped["content"].startswith("looked")
    assert "not given (unknown or not allowed): nope, ask_user" in skipped["content"]
    (task,) = SubAgentTask.objects.all()
    assert task.status == "succeeded"


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_iteration_cap_and_the_timeout_stop_a_child(server, fake_api, version):
    fake_api.script(
        [
            turn(
                tool_use("sub_agent", {"task": "LOOPER: keep globbing", "role": "looper"}, id="toolu_l"),
                tool_use("sub_agent", {"task": "SLOW: think long", "role": "slow"}, id="toolu_s"),
            ),
            text_turn(["stopped"]),
        ]
    )
    fake_api.script_for("LOOPER", [tool_turn("glob", {"pattern": f"*{i}"}) for i in range(3)])
    fake_api.script_for("SLOW", [text_turn(["never in time"]).paced(0.5)])
    body = run_input(f"t-sub-cap-{version}", "r1", user("delegate"))
    with override_settings(SUBAGENT_MAX_ITERATIONS=3, SUBAGENT_TIMEOUT_SECONDS=1.0):
        stream = post_run(server.url, "coder", v1(body) if version == "1" else body)
    server.drain()
    assert stream.events[-1]["type"] == "RUN_FINISHED"
    results = _tool_results(fake_api.requests[-1])
    assert results["toolu_l"]["is_error"] is True and "iteration cap of 3" in results["toolu_l"]["content"]
    assert results["toolu_s"]["is_error"] is True and "timed out after 1 s" in results["toolu_s"]["content"]
    tasks = {t.role: t for t in SubAgentTask.objects.all()}
    assert tasks["looper"].status == tasks["slow"].status == "stopped"
    assert len(tasks["looper"].tool_calls) == 3
    types = {e["type"] for e in stream.events}
    if version == "1":
        assert {"SUBAGENT_STARTED", "SUBAGENT_ERROR"} <= types
    else:
        assert not {t for t in types if t.startswith("SUBAGENT")}
        assert not any("subagentRunId" in e for e in stream.events)
        assert not any(e.get("toolCallId", "").startswith("toolu_fake") for e in stream.events)


def test_cancelling_the_parent_cancels_the_child(server, fake_api):
    fake_api.script([tool_turn("sub_agent", {"task": "PATIENT: wait", "role": "patient"}, id="toolu_p")])
    fake_api.script_for("PATIENT", [text_turn(["a"] * 200).paced(0.05)])
    import threading

    import httpx

    holder: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: holder.update(
            stream=post_run(server.url, "coder", v1(run_input("t-sub-cancel", "r1", user("go"))))
        )
    )
    thread.start()
    deadline = time.monotonic() + 10
    # The cancel is sent once the child's model call is streaming (under load the task's row can
    # be there before the call starts, and a child cancelled before it calls has nothing to cut).
    while not SubAgentTask.objects.filter(thread__agui_thread_id="t-sub-cancel").exists() or not any(
        "PATIENT" in str(request.body) for request in list(fake_api.requests)
    ):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    response = httpx.post(
        f"{server.url}/agui/coder/threads/t-sub-cancel/runs/r1/cancel",
        headers={"Authorization": "Bearer test-token"},
        timeout=10,
    )
    assert response.status_code == 202, response.text
    thread.join(20)
    server.drain()
    events = holder["stream"].events
    assert events[-1] == {
        "type": "RUN_FINISHED",
        "threadId": "t-sub-cancel",
        "runId": "r1",
        "outcome": {"type": "cancelled"},
    }
    assert any(e["type"] == "SUBAGENT_ERROR" and e["code"] == "cancelled" for e in events)
    task = SubAgentTask.objects.get()
    assert task.status == "cancelled"
    assert fake_api.requests[-1].outcome == "client_disconnected"


def _by_owner(messages: list[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """Messages grouped by who wrote them (the parent: ""), each group in order. Between groups the
    order is the client's business: it files a result under its call, the server by time."""
    groups: dict[str, list[tuple[Any, ...]]] = {}
    for m in messages:
        if m["role"] == "reasoning":
            continue
        calls = tuple((c["id"], c["function"]["name"]) for c in m.get("toolCalls") or [])
        groups.setdefault(m.get("subagentRunId", ""), []).append(
            (m["id"], m["role"], m.get("content") or None, calls, m.get("toolCallId"))
        )
    return groups


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_real_clients_follow_a_delegation(server, fake_api, version):
    from tests.agui_client import run_client
    from tests.sse import EVENT
    from threads import selectors

    fake_api.script(
        [
            turn(
                tool_use("sub_agent", {"task": "CLIENT-A: read the app", "role": "reader"}, id="toolu_ca"),
                tool_use("sub_agent", {"task": "CLIENT-B: fail", "role": "failer"}, id="toolu_cb"),
            ),
            text_turn(["One worked, one failed."]),
            text_turn(["Still here."]),
        ]
    )
    fake_api.script_for(
        "CLIENT-A",
        [
            turn(tool_use("file_read", {"path": "src/app.py"}, id="toolu_ca1")),
            text_turn(["It says hello."]),
        ],
    )
    fake_api.script_for("CLIENT-B", [http_error(400, "invalid_request_error", "no such model")])
    thread_id = f"t-sub-clients-{version}"
    first, second = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "delegate"}]},
            # The next turn sends back everything the client holds, the children's messages included.
            {"runId": "r2", "append": [{"id": "u2", "role": "user", "content": "and now?"}]},
        ],
    )
    server.drain()
    for result in (first, second):
        assert result["error"] is None, result["error"]
        assert not result.get("warnings"), result["warnings"]
        for event in result["received"]:
            EVENT.validate_python(event)
    received = [e["type"] for e in first["received"]]
    thread = Thread.objects.get(agui_thread_id=thread_id)
    transcript = selectors.thread_transcript(thread=thread)
    if version == "1":
        assert received.count("SUBAGENT_STARTED") == 2
        assert received.count("SUBAGENT_FINISHED") == received.count("SUBAGENT_ERROR") == 1
        assert _by_owner(second["messages"]) == _by_owner(transcript)
        assert len(_by_owner(transcript)) == 2  # the parent and the child that wrote something
    else:
        assert not [t for t in received if t.startswith("SUBAGENT")]
        assert not any("subagentRunId" in e for e in first["received"])
        assert _by_owner(second["messages"]) == _by_owner([m for m in transcript if "subagentRunId" not in m])
    # The board reaches every client, equal to the server's document.
    assert second["state"] == thread.state
    assert {(e["role"], e["status"]) for e in thread.state["subAgents"]} == {
        ("reader", "succeeded"),
        ("failer", "failed"),
    }


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_childs_call_is_approved_across_two_runs(server, fake_api, workspace, version):
    """A child's file_write asks like the parent's would: the AG-UI run ends on the interrupt with
    the child suspended, and the resume announces it again and goes on where it stopped."""
    from tests.agui_client import run_client
    from tests.sse import EVENT

    write = {"path": "child.txt", "content": "from the child\n"}
    fake_api.script(
        [
            tool_turn("sub_agent", {"task": "WRITER: write child.txt", "role": "writer"}, id="toolu_w"),
            text_turn(["Written."]),
        ]
    )
    fake_api.script_for("WRITER", [tool_turn("file_write", write, id="toolu_w1"), text_turn(["child.txt written."])])
    thread_id = f"t-sub-approve-{version}"
    asked, resumed = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "delegate"}]},
            {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}},
        ],
    )
    server.drain()
    for result in (asked, resumed):
        assert result["error"] is None, result["error"]
        assert not result.get("warnings"), result["warnings"]
        for event in result["received"]:
            EVENT.validate_python(event)
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "toolu_w1" and interrupt["reason"] == "confirmation"
    assert (workspace / "child.txt").read_text() == "from the child\n"
    task = SubAgentTask.objects.get(thread__agui_thread_id=thread_id)
    assert task.status == "succeeded" and task.summary == "child.txt written."
    if version == "0":
        assert "subagentRunId" not in interrupt
    if version == "1":
        suspended = next(e for e in asked["received"] if e["type"] == "SUBAGENT_FINISHED")
        assert suspended == {
            "type": "SUBAGENT_FINISHED",
            "subagentRunId": task.id,
            "outcome": {"type": "suspended", "interruptIds": [interrupt["id"]]},
        }
        assert interrupt["subagentRunId"] == task.id  # the question is the child's
        again = [e for e in resumed["received"] if e["type"].startswith("SUBAGENT")]
        assert [e["type"] for e in again] == ["SUBAGENT_STARTED", "SUBAGENT_FINISHED"]
        result = next(
            e for e in resumed["received"] if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "toolu_w1"
        )
        assert result["subagentRunId"] == task.id
    assert resumed["state"] == Thread.objects.get(agui_thread_id=thread_id).state


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_the_offline_demo_delegates_when_asked(server, version):
    from tests.agui_client import run_client

    thread_id = f"t-sub-demo-{version}"
    (result,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": thread_id,
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "delegate a survey"}],
            }
        ],
    )
    server.drain()
    assert result["error"] is None, result["error"]
    (entry,) = result["state"]["subAgents"]
    assert entry["role"] == "surveyor" and entry["status"] == "succeeded"
    # The demo child states its verdict as every child is asked to.
    assert entry["conclusion"] == "success" and entry["summary"].endswith("Conclusion: success")
    assert "README" in entry["summary"] or "readme" in entry["summary"].lower()
    last = [m for m in result["messages"] if m["role"] == "assistant" and "subagentRunId" not in m][-1]
    assert last["content"].startswith("The sub-agent reported:")


THEME = {
    "name": "change_theme",
    "description": "Change the page's colour theme.",
    "parameters": {"type": "object", "properties": {"theme": {"type": "string"}}},
}


@pytest.mark.parametrize("version", ["1", "0"])
def test_a_sub_agent_without_a_tool_list_is_offered_its_parents_tools_but_the_threads_own(server, fake_api, version):
    """No allowed_tools: the parent's whole set, less
    what belongs to the thread and its person (docs/differences.md): ask_user, todo_write,
    grounding_report and the client's tools; and less sub_agent at the depth cap."""
    fake_api.script(
        [tool_turn("sub_agent", {"task": "LEVEL-ONE: look around"}, id="toolu_one"), text_turn(["All seen."])]
    )
    fake_api.script_for(
        "LEVEL-ONE", [tool_turn("sub_agent", {"task": "LEVEL-TWO: look closer"}, id="toolu_two"), text_turn(["ok"])]
    )
    fake_api.script_for("LEVEL-TWO", [text_turn(["closer look done"])])
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        (result,) = run_client(
            version,
            f"{server.url}/agui/coder",
            "test-token",
            [
                {
                    "threadId": f"t-sub-offered-{version}",
                    "runId": "r1",
                    "tools": [THEME],
                    "messages": [{"id": "u1", "role": "user", "content": "survey it"}],
                }
            ],
        )
    server.drain()
    assert result["error"] is None

    def offered(request: Any) -> list[str]:
        return [tool["name"] for tool in request.body["tools"]]

    parent = offered(fake_api.requests[0])
    assert {"ask_user", "todo_write", "grounding_report", "change_theme", "sub_agent", "file_write"} <= set(parent)
    kept_by_the_thread = {"ask_user", "todo_write", "grounding_report", "change_theme"}
    child = offered(_requests_for(fake_api, "LEVEL-ONE")[0])
    assert child == [name for name in parent if name not in kept_by_the_thread]
    grandchild = offered(_requests_for(fake_api, "LEVEL-TWO")[0])
    assert grandchild == [name for name in child if name != "sub_agent"]
