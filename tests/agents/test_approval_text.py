"""The approval a person reads: each mutating tool's call in words, and the call as data for a page."""

from __future__ import annotations

import pytest

from agui.interrupts import interrupt_of
from orchestrator.approval_text import approval_call, approval_message
from orchestrator.waits import OpenCall, WaitKind
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.sse import EVENT
from threads.models import Approval

PATCH = """\
--- a/app.py
+++ b/app.py
@@ -1,2 +1,3 @@
 import os
-print(1)
+print(2)
+print(3)
--- /dev/null
+++ b/NEW.md
@@ -0,0 +1 @@
+hello
"""


def test_a_bash_command_is_shown_once():
    message = approval_message("bash", {"command": "echo ok > a.txt; echo ok"}, "mutating tool")
    assert message == "Allow bash to run `echo ok > a.txt; echo ok`? (mutating tool)"


def test_a_file_write_shows_the_path_and_its_size():
    message = approval_message("file_write", {"path": "notes/a.txt", "content": "one\ntwo\n"})
    assert message == "Allow file_write to write notes/a.txt (8 bytes, 2 lines)?"


def test_a_file_edit_shows_the_path_and_the_replaced_lines():
    message = approval_message("file_edit", {"path": "app.py", "old_string": "print(1)", "new_string": "print(2)"})
    assert message.splitlines() == ["Allow file_edit to change app.py?", "- print(1)", "+ print(2)"]


def test_a_patch_shows_each_file_with_its_line_counts():
    message = approval_message("apply_patch", {"patch": PATCH}, "mutating tool")
    assert message.splitlines() == [
        "Allow apply_patch to change 2 files? (mutating tool)",
        "  app.py +2 -1",
        "  NEW.md (new) +1 -0",
    ]


def test_a_patch_that_does_not_parse_says_so():
    assert "does not parse" in approval_message("apply_patch", {"patch": "not a diff"})


def test_a_todo_list_is_shown_as_a_list():
    todos = [
        {"id": "1", "content": "Read the README", "status": "completed"},
        {"id": "2", "content": "Write the tests", "status": "in_progress"},
        {"id": "3", "content": "Ship", "status": "pending"},
    ]
    message = approval_message("todo_write", {"todos": todos})
    assert message.splitlines() == [
        "Allow todo_write to set the plan (3 items)?",
        "  [x] Read the README",
        "  [~] Write the tests",
        "  [ ] Ship",
    ]
    assert "{" not in message


def test_a_long_command_is_cut_with_a_marker():
    message = approval_message("bash", {"command": "x" * 1000})
    assert "… (600 more characters)" in message and len(message) < 500


def test_the_structured_call_carries_the_diff_of_an_edit_and_a_patch():
    edit = approval_call("file_edit", {"path": "app.py", "old_string": "a\nb", "new_string": "a\nc"})
    assert edit["tool"] == "file_edit" and edit["arguments"]["path"] == "app.py"
    assert "-b\n+c\n" in edit["diff"] and edit["diff"].startswith("--- a/app.py\n+++ b/app.py\n")
    assert approval_call("apply_patch", {"patch": PATCH})["diff"] == PATCH
    assert "diff" not in approval_call("bash", {"command": "ls"})


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_the_interrupt_and_the_admin_queue_show_the_same_text(server, fake_api, workspace, version, admin_client):
    fake_api.script([tool_turn("apply_patch", {"patch": PATCH}, id="toolu_patch"), text_turn(["Done."])])
    thread = f"t-text-{version}"
    (asked,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [{"threadId": thread, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "patch it"}]}],
    )
    assert asked["error"] is None, asked["error"]
    for event in asked["received"]:
        EVENT.validate_python(event)
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["message"].startswith("Allow apply_patch to change 2 files?")
    assert "  app.py +2 -1" in interrupt["message"]
    assert interrupt["metadata"] == {"tool": "apply_patch", "arguments": {"patch": PATCH}, "diff": PATCH}
    approval = Approval.objects.get(pk=interrupt["id"])
    assert approval.message == interrupt["message"]
    page = admin_client.get("/admin/threads/approval/").content.decode()
    assert "app.py +2 -1" in page and "Allow apply_patch to change 2 files?" in page


def test_a_question_carries_no_call():
    asked = OpenCall(
        "c1", "ask_user", WaitKind.QUESTION, "question_1", message="Which?", arguments={"question": "Which?"}
    )
    assert "metadata" not in interrupt_of(asked)
    approval = OpenCall("c2", "bash", WaitKind.APPROVAL, "approval_1", message="Allow?", arguments={"command": "ls"})
    assert interrupt_of(approval)["metadata"]["tool"] == "bash"
