"""The everyday coding flow with the permissions a new user starts with (changes ask first): the
agent reads a file, asks to change it, the person approves, and the file is changed (issue #42).

The read ledger behind the stale-edit check travels with the waiting run's checkpoint, so a read
made before the approval counts after it, whoever answers and however: the AG-UI clients at
1.0.0 and 0.0.59, ``yes_always``, the REST API, the admin. A file changed on disk between the read
and the approval is still refused."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.sse import EVENT, post_run
from threads.models import Approval, Run

pytestmark = pytest.mark.clients
VERSIONS = ["1", "0"]
NOTES = "remember the milk\n"
READ = {"path": "notes.txt"}
EDIT = {"path": "notes.txt", "old_string": "milk", "new_string": "bread"}
PATCH = {
    "patch": "--- a/notes.txt\n+++ b/notes.txt\n@@ -1 +1 @@\n-remember the milk\n+remember the eggs\n",
}


def _script_read_then(fake_api: Any, tool: str, arguments: dict[str, Any], *, more: tuple[Any, ...] = ()) -> None:
    fake_api.script(
        [
            tool_turn("file_read", READ, id="toolu_read"),
            tool_turn(tool, arguments, id="toolu_change"),
            *more,
            text_turn(["Changed."]),
        ]
    )


def _ask_then_answer(server: Any, version: str, thread_id: str, answer: dict[str, Any]) -> list[dict[str, Any]]:
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "fix it"}]}
    results = run_client(
        version, f"{server.url}/agui/coder", "test-token", [first, {"runId": "r1", "answerAll": answer}]
    )
    server.drain()
    for result in results:
        assert result["error"] is None, result["error"]
        for event in result["received"]:
            EVENT.validate_python(event)
    return results


def _change_result(fake_api: Any) -> dict[str, Any]:
    """What the model was told of the change: the tool_result of ``toolu_change``."""
    for request in reversed(fake_api.requests):
        for block in request.body["messages"][-1]["content"]:
            if isinstance(block, dict) and block.get("tool_use_id") == "toolu_change":
                return block
    raise AssertionError("the model was never told the change's result")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("tool", "arguments", "changed"),
    [("file_edit", EDIT, "remember the bread\n"), ("apply_patch", PATCH, "remember the eggs\n")],
)
def test_a_read_file_is_changed_once_the_change_is_approved(
    server, fake_api, workspace, version, tool, arguments, changed
):
    (workspace / "notes.txt").write_text(NOTES)
    _script_read_then(fake_api, tool, arguments)
    asked, resumed = _ask_then_answer(
        server, version, f"t-read-{tool}-{version}", {"status": "resolved", "payload": {"approved": True}}
    )
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "toolu_change" and interrupt["reason"] == "confirmation"
    assert "is_error" not in _change_result(fake_api), _change_result(fake_api)
    assert (workspace / "notes.txt").read_text() == changed
    assert resumed["messages"][-1]["content"] == "Changed."


@pytest.mark.parametrize("version", VERSIONS)
def test_yes_always_lets_the_next_edit_of_the_read_file_run_unasked(server, fake_api, workspace, version):
    (workspace / "notes.txt").write_text(NOTES)
    again = {"path": "notes.txt", "old_string": "bread", "new_string": "butter"}
    _script_read_then(fake_api, "file_edit", EDIT, more=(tool_turn("file_edit", again, id="toolu_again"),))
    asked, resumed = _ask_then_answer(
        server,
        version,
        f"t-read-always-{version}",
        {"status": "resolved", "payload": {"approved": True, "always": True}},
    )
    assert asked["pendingInterrupts"][0]["toolCallId"] == "toolu_change"
    results = {e["toolCallId"]: e["content"] for e in resumed["received"] if e["type"] == "TOOL_CALL_RESULT"}
    assert list(results) == ["toolu_change", "toolu_again"], results
    assert (workspace / "notes.txt").read_text() == "remember the butter\n"
    assert Approval.objects.count() == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_a_file_changed_on_disk_after_the_read_is_still_refused(server, fake_api, workspace, version):
    (workspace / "notes.txt").write_text(NOTES)
    _script_read_then(fake_api, "file_edit", EDIT)
    thread_id = f"t-read-stale-{version}"
    (asked,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "fix it"}]}],
    )
    assert asked["pendingInterrupts"], asked["received"][-1]
    (workspace / "notes.txt").write_text("remember the milk and the tea\n")  # someone else changed it meanwhile
    (answered,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": thread_id,
                "runId": "r1",
                "messages": asked["messages"],
                "resume": [
                    {"interruptId": i["id"], "status": "resolved", "payload": {"approved": True}}
                    for i in asked["pendingInterrupts"]
                ],
            }
        ],
    )
    server.drain()
    assert answered["error"] is None, answered["error"]
    told = _change_result(fake_api)
    assert told.get("is_error") is True and "changed on disk since you last read it" in told["content"]
    assert (workspace / "notes.txt").read_text() == "remember the milk and the tea\n"


def _asked(server: Any, thread_id: str) -> str:
    asked = post_run(server.url, "coder", v1(run_input(thread_id, "r1", user("fix it"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "toolu_change"
    return str(interrupt["id"])


def _went_on(server: Any, thread_id: str) -> None:
    eventually(
        lambda: Run.objects.filter(
            thread__agui_thread_id=thread_id, agui_run_id="r1-continued", finished_at__isnull=False
        ).exists(),
        what="the run that went on from the answer to end",
    )
    server.drain()


def test_an_edit_approved_through_the_rest_api_is_made(server, fake_api, workspace):
    (workspace / "notes.txt").write_text(NOTES)
    _script_read_then(fake_api, "file_edit", EDIT)
    pending = _asked(server, "t-read-api")
    staff = User.objects.create_user("ops", password="a-long-password", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="change_approval"))
    token = Token.objects.create(user=staff).key
    answered = httpx.post(
        f"{server.url}/api/approvals/{pending}/answer",
        headers={"Authorization": f"Token {token}"},
        json={"approved": True},
        timeout=10,
    )
    assert answered.status_code == 200, answered.text
    _went_on(server, "t-read-api")
    assert "is_error" not in _change_result(fake_api), _change_result(fake_api)
    assert (workspace / "notes.txt").read_text() == "remember the bread\n"


def test_an_edit_approved_in_the_admin_is_made(server, fake_api, workspace, client):
    (workspace / "notes.txt").write_text(NOTES)
    _script_read_then(fake_api, "file_edit", EDIT)
    pending = _asked(server, "t-read-admin")
    client.force_login(User.objects.create_superuser("op", "op@example.com", "a-long-password"))
    response = client.post(
        "/admin/threads/approval/", {"action": "approve", "_selected_action": [pending]}, follow=True
    )
    assert b"Answered 1 pending approval" in response.content
    _went_on(server, "t-read-admin")
    assert "is_error" not in _change_result(fake_api), _change_result(fake_api)
    assert (workspace / "notes.txt").read_text() == "remember the bread\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_file_read_in_an_earlier_run_of_the_conversation_can_be_edited_in_the_next(
    server, fake_api, workspace, version
):
    (workspace / "notes.txt").write_text(NOTES)
    fake_api.script(
        [
            tool_turn("file_read", READ, id="toolu_read"),
            text_turn(["It says to remember the milk."]),
            tool_turn("file_edit", EDIT, id="toolu_change"),
            text_turn(["Changed."]),
        ]
    )
    thread_id = f"t-read-earlier-{version}"
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "read it"}]}
    second = {"runId": "r2", "messages": [{"id": "u2", "role": "user", "content": "bread, not milk"}]}
    answer = {"runId": "r2", "answerAll": {"status": "resolved", "payload": {"approved": True}}}
    results = run_client(version, f"{server.url}/agui/coder", "test-token", [first, second, answer])
    server.drain()
    assert [r["error"] for r in results] == [None, None, None]
    assert "is_error" not in _change_result(fake_api), _change_result(fake_api)
    assert (workspace / "notes.txt").read_text() == "remember the bread\n"


def test_a_file_changed_on_disk_since_an_earlier_run_read_it_is_refused(server, fake_api, workspace):
    (workspace / "notes.txt").write_text(NOTES)
    fake_api.script(
        [
            tool_turn("file_read", READ, id="toolu_read"),
            text_turn(["It says to remember the milk."]),
            tool_turn("file_edit", EDIT, id="toolu_change"),
            text_turn(["It changed."]),
        ]
    )
    post_run(server.url, "coder", v1(run_input("t-read-earlier-stale", "r1", user("read it", "u1"))))
    server.drain()
    (workspace / "notes.txt").write_text("remember the milk and the tea\n")
    pending = post_run(server.url, "coder", v1(run_input("t-read-earlier-stale", "r2", user("bread", "u2"))))
    (interrupt,) = pending.events[-1]["outcome"]["interrupts"]
    resume = {"resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]}
    post_run(server.url, "coder", v1(run_input("t-read-earlier-stale", "r2", **resume)))
    server.drain()
    told = _change_result(fake_api)
    assert told.get("is_error") is True and "changed on disk since you last read it" in told["content"]
    assert (workspace / "notes.txt").read_text() == "remember the milk and the tea\n"
