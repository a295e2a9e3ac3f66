"""An MCP server that asks the person mid-call (elicitation, issue #46): the question becomes an AG-UI
interrupt (``mcp:elicitation``), the run waits on it in the database like on an approval, and the
answer (accept with content, decline, cancel) reaches the server: through a call made again on a
server of the handshake era, as the retried call's ``inputResponses`` on one of 2026-07-28. With the
settings a new user starts with: the MCP call itself asks for approval first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import elicit_stdio, mcp_servers

pytestmark = pytest.mark.clients

REVISIONS = ["2025-11-25", "2026-07-28"]
APPROVE = {"status": "resolved", "payload": {"approved": True}}


def _elicited(
    server: Any, fake_api: Any, tmp_path: Path, version: str, revision: str, answer: dict[str, Any], tool: str = "book"
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The model calls ``tool``; the call is approved, the server asks, ``answer`` answers it. Returns
    the interrupt the question became, the answered run, and what the server received."""
    record = tmp_path / "received.jsonl"
    fake_api.script([tool_turn(f"mcp__shop__{tool}", {}, id="toolu_b"), text_turn(["Done."])])
    thread_id = f"t-elicit-{tool}-{version}-{revision}-{answer.get('status')}"
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "book"}]}
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio(revision, record=record)}):
        approved, asked, answered = run_client(
            version,
            f"{server.url}/agui/coder",
            server.token,
            [first, {"runId": "r1", "answerAll": APPROVE}, {"runId": "r1", "answerAll": answer}],
        )
    assert approved["error"] is None and asked["error"] is None and answered["error"] is None
    (interrupt,) = asked["pendingInterrupts"]
    received = [json.loads(line) for line in record.read_text().splitlines()]
    return interrupt, answered, received


def _result(answered: dict[str, Any]) -> str:
    (result,) = [e for e in answered["received"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == "toolu_b"
    return str(result["content"])


def _calls(received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in received if m.get("method") == "tools/call"]


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_form_question_accepted_reaches_the_server_with_its_content(
    server, fake_api, tmp_path: Path, version: str, revision: str
) -> None:
    content = {"seats": 2, "name": "Ann"}
    answer = {"status": "resolved", "payload": content}
    interrupt, answered, received = _elicited(server, fake_api, tmp_path, version, revision, answer)
    assert interrupt["reason"] == "mcp:elicitation"
    assert interrupt["message"] == "How many seats, and for whom?"
    assert interrupt["toolCallId"] == "toolu_b"
    assert interrupt["responseSchema"]["properties"]["seats"]["maximum"] == 8
    assert interrupt["metadata"] == {"server": "shop", "tool": "book", "mode": "form"}
    assert interrupt["expiresAt"]
    assert _result(answered) == 'book done with {"name": "Ann", "seats": 2}'
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_b" and "Ann" in told["content"]
    assert answered["messages"][-1]["content"] == "Done."
    calls = _calls(received)
    if revision == "2026-07-28":
        # One call answered input_required; the retry carried the answer and echoed the state.
        assert len(calls) == 2 and "inputResponses" not in calls[0]
        assert calls[1]["inputResponses"] == {"seats": {"action": "accept", "content": content}}
        assert calls[1]["requestState"] == "opaque-state-1"
    else:
        # The call that asked was cancelled; the one made again got the stored answer when it asked.
        cancelled = [m for m in received if m.get("method") == "notifications/cancelled"]
        assert len(calls) == 2 and len(cancelled) == 1
        answers = [m["result"] for m in received if "result" in m and m.get("id", "").startswith("q-")]
        assert answers == [{"action": "cancel"}, {"action": "accept", "content": content}]


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_question_declined_is_told_to_the_server(
    server, fake_api, tmp_path: Path, version: str, revision: str
) -> None:
    answer = {"status": "resolved", "payload": {"action": "decline"}}
    _, answered, _ = _elicited(server, fake_api, tmp_path, version, revision, answer)
    assert _result(answered) == "book: the person chose decline"


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_question_cancelled_is_told_to_the_server(
    server, fake_api, tmp_path: Path, version: str, revision: str
) -> None:
    _, answered, _ = _elicited(server, fake_api, tmp_path, version, revision, {"status": "cancelled"})
    assert _result(answered) == "book: the person chose cancel"


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_url_question_carries_the_url_and_its_domain(server, fake_api, tmp_path: Path, revision: str) -> None:
    answer = {"status": "resolved", "payload": {"action": "accept"}}
    interrupt, answered, _ = _elicited(server, fake_api, tmp_path, "1", revision, answer, tool="sign_in")
    assert interrupt["reason"] == "mcp:elicitation"
    assert interrupt["metadata"] == {
        "server": "shop",
        "tool": "sign_in",
        "mode": "url",
        "url": "https://login.example.com/authorize?session=abc",
        "domain": "login.example.com",
    }
    assert interrupt["responseSchema"]["properties"]["action"]["enum"] == ["accept", "decline", "cancel"]
    assert _result(answered) == "sign_in done with accepted"
