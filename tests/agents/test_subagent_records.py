"""What a sub-agent's record and summary say: the files it changed, whether each call
ended, its grounding mode, and a token budget bounded by what its parent has left."""

from __future__ import annotations

import json
from typing import Any

from django.test import override_settings

from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import SubAgentTask


def _tool_results(request: Any) -> dict[str, dict[str, Any]]:
    content = request.body["messages"][-1]["content"]
    return {block["tool_use_id"]: block for block in content if block.get("type") == "tool_result"}


def _requests_for(fake: Any, marker: str) -> list[Any]:
    return [r for r in fake.requests if marker in json.dumps(r.body["messages"][0]["content"])]


def test_the_summary_counts_the_files_the_child_changed(server, fake_api, workspace):
    fake_api.script([tool_turn("sub_agent", {"task": "WRITER: write two notes"}, id="toolu_w"), text_turn(["ok"])])
    fake_api.script_for(
        "WRITER",
        [
            tool_turn("file_read", {"path": "README.md"}),
            tool_turn("file_write", {"path": "a.txt", "content": "a\n"}),
            tool_turn("file_write", {"path": "b.txt", "content": "b\n"}),
            tool_turn("file_edit", {"path": "a.txt", "old_string": "a", "new_string": "A"}),
            text_turn(["wrote them"]),
        ],
    )
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        post_run(server.url, "coder", v1(run_input("t-sub-files", "r1", user("delegate writing"))))
        server.drain()
    content = _tool_results(fake_api.requests[-1])["toolu_w"]["content"]
    assert "2 file(s) changed" in content  # a.txt twice and b.txt; the README was only read
    assert (workspace / "b.txt").read_text() == "b\n"


def test_a_call_the_child_never_finished_is_kept_as_not_ended(server, fake_api, workspace):
    fake_api.script([tool_turn("sub_agent", {"task": "SLEEPER: wait"}, id="toolu_s"), text_turn(["ok"])])
    fake_api.script_for("SLEEPER", [tool_turn("bash", {"command": "sleep 20"}, id="toolu_sleep")])
    with override_settings(AGENT_MUTATING_TOOLS="on", SUBAGENT_TIMEOUT_SECONDS=1.0):
        post_run(server.url, "coder", v1(run_input("t-sub-sleep", "r1", user("delegate a wait"))))
        server.drain()
    (task,) = SubAgentTask.objects.filter(thread__agui_thread_id="t-sub-sleep")
    assert task.status == "stopped"
    (call,) = task.tool_calls
    assert (call["id"], call["name"], call["ended"]) == ("toolu_sleep", "bash", False)


def test_a_child_is_bounded_by_its_parents_remaining_token_budget(server, fake_api, coder):
    coder.token_budget = 1_000
    coder.save()
    fake_api.script(
        [
            tool_turn("sub_agent", {"task": "SPENDER: spend"}, id="toolu_b", input_tokens=600, output_tokens=10),
            text_turn(["done"], input_tokens=10, output_tokens=5),
        ]
    )
    # The child's first call uses more than the 390 tokens its parent has left: it stops there.
    fake_api.script_for(
        "SPENDER",
        [tool_turn("glob", {"pattern": "*"}, input_tokens=500, output_tokens=10), text_turn(["never asked"])],
    )
    stream = post_run(server.url, "coder", v1(run_input("t-sub-budget", "r1", user("delegate spending"))))
    server.drain()
    assert len(_requests_for(fake_api, "SPENDER")) == 1
    (task,) = SubAgentTask.objects.filter(thread__agui_thread_id="t-sub-budget")
    # Stopped by a limit: its verdict is partial, and the error says which limit.
    assert (task.status, task.conclusion) == ("stopped", "partial") and "token budget" in task.error
    result = next(e for e in stream.events if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "toolu_b")
    assert "its parent's token budget ran out" in result["content"]
    # The child's tokens count on the parent's budget, which is spent too: the parent pauses.
    assert {"type": "CUSTOM", "name": "threadline.paused", "value": {"reason": "token_budget"}} in stream.events


def test_a_child_works_in_the_advisory_grounding_mode(server, fake_api):
    fake_api.script([tool_turn("sub_agent", {"task": "READER: read"}, id="toolu_r"), text_turn(["ok"])])
    fake_api.script_for("READER", [text_turn(["read"])])
    post_run(server.url, "coder", v1(run_input("t-sub-ground", "r1", user("delegate reading"))))
    server.drain()
    (child,) = _requests_for(fake_api, "READER")
    system = child.body["system"][0]["text"]
    assert "Grounding: before you change anything, read the code" in system
    assert "grounding_report" not in system  # the child has no such tool; the thread's grounding is its parent's


def test_no_child_starts_once_the_parents_budget_is_spent(server, fake_api, coder):
    coder.token_budget = 100
    coder.save()
    fake_api.script([tool_turn("sub_agent", {"task": "LATE: too late"}, id="toolu_late", input_tokens=200)])
    stream = post_run(server.url, "coder", v1(run_input("t-sub-spent", "r1", user("delegate late"))))
    server.drain()
    result = next(e for e in stream.events if e["type"] == "TOOL_CALL_RESULT")
    assert json.loads(result["content"])["error"] == "token_budget"
    assert not _requests_for(fake_api, "LATE") and not SubAgentTask.objects.exists()
