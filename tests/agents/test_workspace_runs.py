"""Runs that change the workspace, through the AG-UI endpoint: mutating tools, todos in the state document."""

from __future__ import annotations

import jsonpatch
import pytest
from django.test import override_settings

from agui.state import ThreadState
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Thread


@pytest.fixture
def mutating_on():
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        yield


def test_mutating_tools_can_be_turned_off(server, fake_api):
    fake_api.script([text_turn(["ok"])])
    with override_settings(AGENT_MUTATING_TOOLS="off"):
        post_run(server.url, "coder", v1(run_input("t-off", "r1", user("hi"))))
    offered = [tool["name"] for tool in fake_api.requests[0].body["tools"]]
    assert offered == ["glob", "grep", "file_read", "web_fetch", "ask_user", "grounding_report", "sub_agent"]


def test_the_agent_reads_then_edits_a_file(server, fake_api, workspace, mutating_on):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "src/app.py"}),
            tool_turn("file_edit", {"path": "src/app.py", "old_string": "'hello'", "new_string": "'hello, world'"}),
            tool_turn("bash", {"command": "cd src && python3 -c 'import app; print(app.main())'"}),
            text_turn(["Done."]),
        ]
    )
    stream = post_run(server.url, "coder", v1(run_input("t-edit", "r1", user("change the greeting"))))
    assert stream.types[-1] == "RUN_FINISHED"
    assert (workspace / "src" / "app.py").read_text() == "def main():\n    return 'hello, world'\n"
    results = [e["content"] for e in stream.events if e["type"] == "TOOL_CALL_RESULT"]
    assert "hello, world" in results[2]
    server.drain()
    files = Thread.objects.get(agui_thread_id="t-edit").state["files"]
    assert files == [{"path": "src/app.py", "name": "app.py", "action": "edit"}]


def test_an_edit_of_a_file_changed_since_it_was_read_is_refused(server, fake_api, workspace, mutating_on):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "README.md"}),
            tool_turn("bash", {"command": "echo changed-outside >> README.md"}),
            tool_turn("file_edit", {"path": "README.md", "old_string": "# Demo", "new_string": "# Edited"}),
            text_turn(["I will read it again."]),
        ]
    )
    stream = post_run(server.url, "coder", v1(run_input("t-stale", "r1", user("edit"))))
    results = [e for e in stream.events if e["type"] == "TOOL_CALL_RESULT"]
    assert "the file changed on disk since you last read it" in results[2]["content"]
    assert (workspace / "README.md").read_text().startswith("# Demo project")


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_todos_reach_the_state_document_for_both_clients(server, fake_api, mutating_on, version):
    todos = [
        {"id": "1", "content": "read the code", "status": "completed"},
        {"id": "2", "content": "write the fix", "status": "in_progress"},
    ]
    fake_api.script(
        [
            tool_turn("todo_write", {"todos": todos}),
            tool_turn("todo_write", {"todos": [todos[0], {**todos[1], "status": "completed"}]}),
            text_turn(["All done."]),
        ]
    )
    thread_id = f"t-todos-{version}"
    (result,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "plan"}]},
        ],
    )
    assert result["error"] is None
    server.drain()
    document = Thread.objects.get(agui_thread_id=thread_id).state
    assert document["todos"][1] == {"id": "2", "content": "write the fix", "status": "completed"}
    assert result["state"] == document
    deltas = [e["delta"] for e in result["received"] if e["type"] == "STATE_DELTA"]
    assert [{"op": "replace", "path": "/todos/1/status", "value": "completed"}] in deltas


def test_a_one_item_change_among_thousands_is_one_operation():
    todos = tuple({"id": str(i), "content": f"task {i}", "status": "pending"} for i in range(5000))
    state = ThreadState({"todos": [dict(t) for t in todos]})
    changed = list(todos)
    changed[4321] = {**changed[4321], "status": "completed"}
    ops = state.todo_ops(tuple(changed))
    assert ops == [{"op": "replace", "path": "/todos/4321/status", "value": "completed"}]
    assert jsonpatch.apply_patch({"todos": list(todos)}, ops) == {"todos": changed}
