"""Input the encoder or the database cannot take is refused at the door with a 400 naming the field:
JSON nested deeper than events can carry, NUL characters, ids too long or with control characters.
The same refusals hold on PostgreSQL (the services test at the end)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Message, Run, Thread

TOO_DEEP = 300  # past what orjson encodes (254), and far past the server's limit (128)


def deep_list(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def _base(**extra: Any) -> dict[str, Any]:
    return v1(run_input("t-limits", "r1", user("hi", "m1"), **extra))


def _with_message(message: dict[str, Any]) -> dict[str, Any]:
    return v1(run_input("t-limits", "r1", message))


ASSISTANT_DEEP_ARGS = {
    "id": "a1",
    "role": "assistant",
    "toolCalls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps(deep_list(200))}}],
}

# (body, field named in the error)
REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("deep state", _base(state=deep_list(TOO_DEEP)), "state"),
    ("state just past the limit", _base(state=deep_list(128)), "state"),
    ("deep forwardedProps", _base(forwardedProps={"x": deep_list(TOO_DEEP)}), "forwardedProps"),
    ("deep message field", _with_message({**user("hi", "m1"), "extra": deep_list(TOO_DEEP)}), "messages.0.extra"),
    ("deep context", _base(context=[{"description": "d", "value": deep_list(TOO_DEEP)}]), "context.0.value"),
    (
        "deep resume payload",
        _base(resume=[{"interruptId": "i1", "status": "resolved", "payload": deep_list(TOO_DEEP)}]),
        "resume.0.payload",
    ),
    (
        "deep tool parameters",
        _base(tools=[{"name": "t", "description": "d", "parameters": deep_list(TOO_DEEP)}]),
        "tools.0.parameters",
    ),
    (
        "deep tool call arguments",
        v1(run_input("t-limits", "r1", user("hi", "m0"), ASSISTANT_DEEP_ARGS, user("again", "m1"))),
        "messages.1.toolCalls.0.function.arguments",
    ),
    ("NUL in state", _base(state={"note": "a\u0000b"}), "state.note"),
    ("NUL in a key", _base(forwardedProps={"k\u0000": 1}), "forwardedProps.k\u0000"),
    ("NUL in a message", _with_message(user("a\u0000b", "m1")), "messages.0.content"),
    ("NUL in the thread id", v1(run_input("t\u0000", "r1", user("hi"))), "threadId"),
    ("NUL in the run id", v1(run_input("t", "r\u0000", user("hi"))), "runId"),
    ("a long thread id", v1(run_input("t" * 201, "r1", user("hi"))), "threadId"),
    ("a slash in the run id", v1(run_input("t", "r/1", user("hi"))), "runId"),
    ("a newline in the thread id", v1(run_input("t\n1", "r1", user("hi"))), "threadId"),
    ("a long message id", _with_message(user("hi", "m" * 201)), "messages.0.id"),
    ("a control character in a message id", _with_message(user("hi", "m\u0007")), "messages.0.id"),
    (
        "a long tool call id",
        v1(
            run_input(
                "t-limits",
                "r1",
                {
                    "id": "a1",
                    "role": "assistant",
                    "toolCalls": [{"id": "c" * 201, "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                {"id": "tm", "role": "tool", "toolCallId": "c" * 201, "content": "ok"},
            )
        ),
        "messages.0.toolCalls.0.id",
    ),
    (
        "a long tool result id",
        _with_message({"id": "tm", "role": "tool", "toolCallId": "c" * 201, "content": "ok"}),
        "messages.0.toolCallId",
    ),
    ("a long interrupt id", _base(resume=[{"interruptId": "i" * 201, "status": "resolved"}]), "resume.0.interruptId"),
    ("a long parent run id", _base(parentRunId="p" * 201), "parentRunId"),
    # Stored in a 16-character column: PostgreSQL refused it, and the stream ended in RUN_ERROR internal.
    ("a long protocol version", {**_base(), "protocolVersion": "1.0." + "0" * 13}, "protocolVersion"),
]


def _post(url: str, token: str, body: dict[str, Any]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    # json, not orjson: the client may send what orjson would refuse to encode.
    return httpx.post(f"{url}/agui/coder", content=json.dumps(body).encode(), headers=headers, timeout=30)


def _assert_refused(response: httpx.Response, field: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["field"] == field, error


@pytest.mark.parametrize(("case", "body", "field"), REFUSED, ids=[c[0] for c in REFUSED])
def test_it_refuses_what_the_encoder_or_the_database_cannot_take(server, case, body, field):
    _assert_refused(_post(server.url, server.token, body), field)
    assert Thread.objects.count() == 0
    assert Run.objects.count() == 0


def test_state_as_deep_as_the_limit_runs_and_is_echoed(server):
    state = {"a": deep_list(126)}  # with the body around it, 128 levels
    stream = post_run(server.url, "coder", _base(state=state))
    assert stream.types[-1] == "RUN_FINISHED", stream.types
    snapshot = next(e for e in stream.events if e["type"] == "STATE_SNAPSHOT")
    assert snapshot["snapshot"]["client"] == state


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("threads/t%00/events", "threadId"),
        ("threads/t/runs/r%00/events", "runId"),
        ("threads/t/runs/r%00/cancel", "runId"),
        (f"threads/{'t' * 201}/events", "threadId"),
        ("threads/t%0A/runs/r/cancel", "threadId"),
    ],
)
def test_the_ids_of_reattach_and_cancel_urls_are_checked(server, path, field):
    method = "POST" if path.endswith("cancel") else "GET"
    response = httpx.request(method, f"{server.url}/agui/coder/{path}", headers={"Authorization": "Bearer test-token"})
    _assert_refused(response, field)


def test_a_deeply_nested_message_stored_earlier_does_not_hang_a_reload(server):
    """A message stored before the depth limit (decoding took 1,024 levels): the hydrate that
    replays it still ends, with the message cut where it was too deep."""
    assert post_run(server.url, "coder", _base()).types[-1] == "RUN_FINISHED"
    server.drain()
    thread = Thread.objects.get(agui_thread_id="t-limits")
    deep = {"id": "old", "role": "user", "content": "old", "extra": deep_list(TOO_DEEP)}
    Message.objects.create(thread=thread, position=99, message_id="old", role="user", body=deep)
    hydrate = post_run(server.url, "coder", v1(run_input("t-limits", "r2", user("hi", "m1"))))
    assert hydrate.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    replayed = hydrate.events[1]["messages"][-1]
    assert replayed["id"] == "old"
    assert "cut by the server" in orjson.dumps(replayed).decode()


@pytest.mark.services
def test_the_same_refusals_hold_on_postgresql(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from tests.procs import ServerProcess

    database_url = request.getfixturevalue("postgres_url")
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    proc = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env={"DATABASE_URL": database_url})
    proc.start()
    try:
        for case, body, field in REFUSED:
            response = _post(proc.url, proc.token, body)
            assert response.status_code == 400, (case, response.text)
            assert response.json()["error"]["field"] == field, case
        for path in ("threads/t%00/events", "threads/t/runs/r%00/events", "threads/t%00/runs/r/cancel"):
            method = "POST" if path.endswith("cancel") else "GET"
            response = httpx.request(method, f"{proc.url}/agui/coder/{path}", headers=proc.headers, timeout=10)
            assert response.status_code == 400, (path, response.text)
        # What is allowed is stored: a run with 200-character ids and an unusual but printable id.
        ok = v1(run_input("t" * 200, "r" * 200, user("hi", "m" * 200)))
        stream = post_run(proc.url, "coder", ok, token=proc.token)
        assert stream.types[-1] == "RUN_FINISHED", stream.events[-1]
    finally:
        proc.kill()
