"""The thread routes as CopilotKit's useThreads reads them (issue #44 item 3): the list (newest
activity first, cursor-paged, archived ones on request), rename, archive and unarchive, delete, and
a thread's messages, events and state. Bad input gets a 4xx and stores nothing."""

from __future__ import annotations

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from threads.models import Approval, EventFrame, Message, Run, Session, Thread

pytestmark = pytest.mark.clients


@pytest.fixture
def olive(server):
    key = Token.objects.create(user=User.objects.create_user("olive")).key
    return {"Authorization": f"Token {key}", "Content-Type": "application/json"}


def _run(server, headers, thread_id, text):
    response = httpx.post(
        f"{server.url}/copilotkit/agent/coder/run",
        content=orjson.dumps(v1(run_input(thread_id, f"r-{thread_id}-{text}", user(text, f"u-{thread_id}-{text}")))),
        headers=headers,
        timeout=30,
    )
    server.drain()
    assert response.status_code == 200
    return response


def _call(server, headers, method, path, body=None):
    content = orjson.dumps(body) if body is not None else None
    return httpx.request(method, f"{server.url}/copilotkit{path}", content=content, headers=headers, timeout=30)


def test_the_list_is_newest_activity_first_and_pages_with_its_cursor(server, fake_api, olive):
    fake_api.script([text_turn([f"Answer {n}."]) for n in range(4)])
    for name in ("t-a", "t-b", "t-c"):
        _run(server, olive, name, f"first words of {name}")
    _run(server, olive, "t-a", "more")  # t-a is the newest activity now
    first = _call(server, olive, "GET", "/threads?agentId=coder&limit=2").json()
    assert [t["id"] for t in first["threads"]] == ["t-a", "t-c"]
    record = first["threads"][0]
    assert record["name"] == "first words of t-a"  # its first message, until it is renamed
    assert record["agentId"] == "coder" and record["archived"] is False
    assert record["createdAt"].endswith("Z") and record["lastRunAt"] >= record["createdAt"]
    second = _call(server, olive, "GET", f"/threads?agentId=coder&limit=2&cursor={first['nextCursor']}").json()
    assert [t["id"] for t in second["threads"]] == ["t-b"] and second["nextCursor"] is None
    assert _call(server, olive, "GET", "/threads?agentId=someone-else").json() == {"threads": [], "nextCursor": None}


def test_rename_archive_unarchive_round_trip(server, fake_api, olive):
    fake_api.script([text_turn(["Sure."])])
    _run(server, olive, "t-r", "please fix the login page")
    renamed = _call(server, olive, "PATCH", "/threads/t-r", {"agentId": "coder", "name": "Login bug"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "Login bug"
    assert Thread.objects.get().title == "Login bug"
    archived = _call(server, olive, "POST", "/threads/t-r/archive", {"agentId": "coder"})
    assert archived.json() == {"threadId": "t-r", "archived": True}
    assert _call(server, olive, "GET", "/threads").json()["threads"] == []
    (kept,) = _call(server, olive, "GET", "/threads?includeArchived=true").json()["threads"]
    assert (kept["id"], kept["archived"], kept["name"]) == ("t-r", True, "Login bug")
    back = _call(server, olive, "PATCH", "/threads/t-r", {"agentId": "coder", "archived": False})
    assert back.json()["archived"] is False
    assert [t["id"] for t in _call(server, olive, "GET", "/threads").json()["threads"]] == ["t-r"]
    # A blank name gives the thread back its first message as its name.
    reset = _call(server, olive, "PATCH", "/threads/t-r", {"agentId": "coder", "name": ""})
    assert reset.json()["name"] == "please fix the login page"
    # The REST API shows the same name and flag.
    listed = httpx.get(f"{server.url}/api/threads/", headers=olive).json()["results"]
    assert (listed[0]["title"], listed[0]["archived"]) == ("please fix the login page", False)


def test_delete_takes_the_thread_and_everything_of_it(server, fake_api, olive, workspace):
    fake_api.script([tool_turn("file_write", {"path": "n.txt", "content": "x"}, id="toolu_1")])
    _run(server, olive, "t-d", "write a note")
    assert Approval.objects.exists() and EventFrame.objects.exists()
    deleted = _call(server, olive, "DELETE", "/threads/t-d", {"agentId": "coder"})
    assert deleted.json() == {"threadId": "t-d", "deleted": True}
    for model in (Thread, Session, Message, Run, EventFrame, Approval):
        assert not model.objects.exists(), model
    assert _call(server, olive, "GET", "/threads/t-d/messages").status_code == 404


def test_a_threads_messages_events_and_state(server, fake_api, olive):
    fake_api.script([tool_turn("glob", {"pattern": "*.md"}, id="toolu_g"), text_turn(["Found README.md."])])
    _run(server, olive, "t-m", "which docs?")
    messages = _call(server, olive, "GET", "/threads/t-m/messages").json()["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = messages[1]["toolCalls"][0]
    assert call["id"] == "toolu_g" and call["name"] == "glob" and orjson.loads(call["args"]) == {"pattern": "*.md"}
    assert messages[2]["toolCallId"] == "toolu_g"
    events = _call(server, olive, "GET", "/threads/t-m/events").json()["events"]
    assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
    state = _call(server, olive, "GET", "/threads/t-m/state").json()["state"]
    assert state["thread"] == "t-m" and "tokenUsage" in state


def test_bad_input_is_refused_and_changes_nothing(server, fake_api, olive):
    fake_api.script([text_turn(["Hi."])])
    _run(server, olive, "t-x", "hello")
    for path in ("/threads?cursor=not-ours", "/threads?limit=0", "/threads?limit=x", "/threads?includeArchived=yes"):
        response = _call(server, olive, "GET", path)
        assert response.status_code == 400, path
    assert _call(server, olive, "GET", "/threads?cursor=not-ours").json()["error"]["code"] == "invalid_cursor"
    # A cursor made for another caller is not theirs either.
    fake_api.script([text_turn(["One."]), text_turn(["Two."])])
    _run(server, {"Authorization": "Bearer test-token", "Content-Type": "application/json"}, "t-s1", "one")
    _run(server, {"Authorization": "Bearer test-token", "Content-Type": "application/json"}, "t-s2", "two")
    shared_cursor = httpx.get(
        f"{server.url}/copilotkit/threads?limit=1", headers={"Authorization": "Bearer test-token"}
    )
    assert _call(server, olive, "GET", f"/threads?cursor={shared_cursor.json()['nextCursor']}").status_code == 400
    for method, path, body, status in (
        ("GET", "/threads/t-nope/messages", None, 404),
        ("PATCH", "/threads/t-nope", {"name": "x"}, 404),
        ("PATCH", "/threads/t-x", {"name": 7}, 400),
        ("PATCH", "/threads/t-x", {"name": "x" * 201}, 400),
        ("PATCH", "/threads/t-x", {"archived": "yes"}, 400),
        ("PATCH", "/threads/t-x", {"agentId": "another-agent", "name": "x"}, 404),
        ("POST", "/threads/t-x", {}, 405),
    ):
        assert _call(server, olive, method, path, body).status_code == status, (method, path, body)
    thread = Thread.objects.get(agui_thread_id="t-x")
    assert (thread.title, thread.archived) == ("hello", False)


def _run_in_background(server, headers, thread_id, text):
    import threading

    done: list[httpx.Response] = []
    body = orjson.dumps(v1(run_input(thread_id, f"r-{thread_id}", user(text, f"u-{thread_id}"))))
    url = f"{server.url}/copilotkit/agent/coder/run"
    sender = threading.Thread(target=lambda: done.append(httpx.post(url, content=body, headers=headers, timeout=30)))
    sender.start()
    return sender, done


def _wait_running(thread_id):
    import time

    deadline = time.monotonic() + 10
    while not Run.objects.filter(thread__agui_thread_id=thread_id).exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_delete_as_the_run_ends_waits_for_it_and_deletes(server, fake_api, olive):
    fake_api.script([text_turn(["ending", " soon"]).paced(0.1)])
    sender, done = _run_in_background(server, olive, "t-ending", "hi")
    _wait_running("t-ending")
    deleted = _call(server, olive, "DELETE", "/threads/t-ending")
    sender.join(30)
    assert deleted.status_code == 200, deleted.text
    assert done[0].status_code == 200 and not Thread.objects.exists()


def test_a_delete_while_a_run_goes_on_is_refused_and_keeps_the_thread(server, fake_api, olive):
    fake_api.script([text_turn(["slow"] * 12).paced(0.5)])
    sender, _ = _run_in_background(server, olive, "t-busy", "hi")
    _wait_running("t-busy")
    refused = _call(server, olive, "DELETE", "/threads/t-busy")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "thread_busy"
    assert Thread.objects.filter(agui_thread_id="t-busy").exists()
    sender.join(30)
