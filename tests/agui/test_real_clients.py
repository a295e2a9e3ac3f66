"""Whole runs through the official @ag-ui/client HttpAgent, with its verifier, at 1.0.0 and 0.0.59."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import split_tokens, text, text_turn, thinking, tool_turn, tool_use, turn
from tests.sse import EVENT
from threads import selectors
from threads.models import Thread

pytestmark = pytest.mark.clients
VERSIONS = ["1", "0"]


def _normal(message: dict[str, Any]) -> dict[str, Any]:
    calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.get("toolCalls") or []]
    return {
        "id": message["id"],
        "role": message["role"],
        "content": message.get("content") or None,
        "toolCalls": calls,
        "toolCallId": message.get("toolCallId"),
    }


def _drive(server: Any, version: str, thread_id: str, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for run in runs:
        run.setdefault("threadId", thread_id)
    results = run_client(version, f"{server.url}/agui/coder", server.token, runs)
    assert len(results) == len(runs), results[-1].get("error")
    server.drain()
    return results


def _say(server: Any, version: str, thread_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """One run of one user message (u1, run r1) through the client."""
    (result,) = _drive(
        server,
        version,
        thread_id,
        [{"runId": "r1", "messages": [{"id": "u1", "role": "user", "content": text}], **extra}],
    )
    return result


def _assert_client_matches_server(result: dict[str, Any], thread_id: str) -> None:
    thread = Thread.objects.get(agui_thread_id=thread_id)
    client = [_normal(m) for m in result["messages"] if m["role"] != "reasoning"]
    server = [_normal(m) for m in selectors.thread_transcript(thread=thread)]
    assert client == server
    assert result["state"] == thread.state


def _check_protocol(result: dict[str, Any], version: str, terminal: str = "RUN_FINISHED") -> None:
    assert result["error"] is None, result["error"]
    types = [e["type"] for e in result["received"]]
    assert types[0] == "RUN_STARTED" and types[-1] == terminal
    assert not result.get("warnings"), result["warnings"]
    for event in result["received"]:
        EVENT.validate_python(event)  # every frame is a valid AG-UI 1.0 event
    if version == "0":
        assert all("protocolVersion" not in e and "outcome" not in e for e in result["received"])
    else:
        assert result["received"][0]["protocolVersion"] == "1.0"


@pytest.mark.parametrize("version", VERSIONS)
def test_chat_and_tool_calls(server, fake_api, version):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "README.md"}, preamble=["Reading ", "the readme."]),
            turn(tool_use("glob", {"pattern": "**/*.py"}), tool_use("grep", {"pattern": "def"})),
            text_turn(split_tokens("It is a demo project with one function.")),
        ]
    )
    thread_id = f"t-clients-{version}"
    result = _say(server, version, thread_id, "what is this?")
    _check_protocol(result, version)
    _assert_client_matches_server(result, thread_id)
    roles = [m["role"] for m in result["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]


@pytest.mark.parametrize("version", VERSIONS)
def test_reasoning_and_a_second_turn(server, fake_api, coder, version):
    coder.thinking_budget = 1024
    coder.save()
    fake_api.script(
        [
            turn(thinking(["Thinking ", "hard."]), text(["First ", "answer."])),
            text_turn(["Second ", "answer."]),
        ]
    )
    thread_id = f"t-clients-think-{version}"
    first, second = _drive(
        server,
        version,
        thread_id,
        [
            {"runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "one"}]},
            {"runId": "r2", "append": [{"id": "u2", "role": "user", "content": "two"}]},
        ],
    )
    _check_protocol(first, version)
    _check_protocol(second, version)
    _assert_client_matches_server(second, thread_id)
    history = fake_api.requests[1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]


@pytest.mark.parametrize("version", VERSIONS)
def test_provider_error_is_a_clean_run_error(server, fake_api, version):
    fake_api.script([text_turn(["Partial ", "reply ", "cut"]).error_mid_stream(after_events=5)])
    result = _say(server, version, f"t-clients-err-{version}", "hi")
    _check_protocol(result, version, terminal="RUN_ERROR")


@pytest.mark.parametrize("version", VERSIONS)
def test_demo_model_with_tool_calls_reported_at_the_end(server, version):
    thread_id = f"t-clients-demo-{version}"
    result = _say(server, version, thread_id, "what is this?")
    _check_protocol(result, version)
    _assert_client_matches_server(result, thread_id)
    tools = [m for m in result["messages"] if m["role"] == "tool"]
    assert "README.md" in tools[0]["content"]


@pytest.mark.parametrize("version", VERSIONS)
def test_state_built_from_snapshot_and_deltas_equals_the_server_document(server, fake_api, version):
    fake_api.script([tool_turn("file_read", {"path": "src/app.py"}), text_turn(["ok"], cache_read_input_tokens=7)])
    thread_id = f"t-clients-state-{version}"
    result = _say(server, version, thread_id, "hi", state={"page": "home"})
    _check_protocol(result, version)
    document = Thread.objects.get(agui_thread_id=thread_id).state
    assert result["state"] == document
    assert document["client"] == {"page": "home"}
    assert document["files"] == [{"path": "src/app.py", "name": "app.py", "action": "read"}]
    # Every delta applies to the client's copy in order (jsonpatch raises otherwise).
    events = result["received"]
    doc = next(e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT")
    for event in events:
        if event["type"] == "STATE_DELTA":
            doc = jsonpatch.apply_patch(doc, event["delta"])
    assert doc == document


@pytest.mark.parametrize("version", VERSIONS)
def test_hydrate_replays_messages_and_state(server, fake_api, version):
    fake_api.script([text_turn(["Hello!"])])
    thread_id = f"t-clients-hydrate-{version}"
    first = _say(server, version, thread_id, "hi")
    # A fresh client (a reloaded page) with no messages asks for the thread.
    (hydrated,) = _drive(server, version, thread_id, [{"runId": "r-hydrate", "messages": []}])
    _check_protocol(hydrated, version)
    types = [e["type"] for e in hydrated["received"]]
    assert types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert [_normal(m) for m in hydrated["messages"]] == [_normal(m) for m in first["messages"]]
    assert len(fake_api.requests) == 1
