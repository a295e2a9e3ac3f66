"""An MCP server that asks the person mid-call (elicitation, issue #46): the question becomes an AG-UI
interrupt (``mcp:elicitation``), the run waits on it in the database like on an approval, and the
answer (accept with content, decline, cancel) reaches the server: through a call made again on a
server of the handshake era, as the retried call's ``inputResponses`` on one of 2026-07-28. With the
settings a new user starts with: the MCP call itself asks for approval first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.mcp_world import elicit_stdio, elicitation_asked, everything_stdio, mcp_servers
from tests.sse import post_run
from threads.models import Approval, Run

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


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"seats": 99}, "resume[0].payload.seats"),
        ({"seats": "two"}, "resume[0].payload.seats"),
        ({"name": "Ann"}, "resume[0].payload.seats"),
        ({"action": "accept", "content": {"seats": 0}}, "resume[0].payload.seats"),
        ({"action": "maybe"}, "resume[0].payload.action"),
    ],
)
def test_an_answer_that_does_not_match_the_schema_is_a_400_naming_the_field(
    server, fake_api, tmp_path: Path, payload: dict[str, Any], field: str
) -> None:
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        interrupt = elicitation_asked(server, fake_api, f"t-elicit-bad-{field}-{len(json.dumps(payload))}")
        thread_id = Approval.objects.get(pk=interrupt["id"]).run.thread.agui_thread_id
        resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
        refused = httpx.post(
            f"{server.url}/agui/coder",
            json=v1(run_input(thread_id, "r1", resume=resume)),
            headers={"Authorization": f"Bearer {server.token}"},
        )
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_input" and error["field"] == field
    assert Approval.objects.get(pk=interrupt["id"]).decision == Approval.Decision.PENDING  # nothing stored
    assert Run.objects.get(thread__agui_thread_id=thread_id, status=Run.Status.WAITING)


def test_an_unanswered_question_expires_like_an_approval(server, fake_api, tmp_path: Path) -> None:
    before = _elicitations(server)
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        with override_settings(APPROVAL_TIMEOUT_SECONDS=0.3):
            interrupt = elicitation_asked(server, fake_api, "t-elicit-expiry")
        eventually(
            lambda: Approval.objects.get(pk=interrupt["id"]).decision == Approval.Decision.TIMEOUT,
            what="the sweep to close the question",
        )
        eventually(lambda: fake_api.requests and len(fake_api.requests) == 2, what="the model told")
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_b" and told["is_error"] is True
    assert "nobody answered in time" in told["content"]
    assert _added(server, before) == {("shop", "timeout"): 1}


def test_answers_are_counted_by_server_and_outcome(server, fake_api, tmp_path: Path) -> None:
    before = _elicitations(server)
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        for n, payload in enumerate([{"seats": 1}, {"action": "decline"}]):
            interrupt = elicitation_asked(server, fake_api, f"t-elicit-count-{n}")
            thread_id = Approval.objects.get(pk=interrupt["id"]).run.thread.agui_thread_id
            resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": payload}]
            post_run(server.url, "coder", v1(run_input(thread_id, "r1", resume=resume)))
    assert _added(server, before) == {("shop", "accept"): 1, ("shop", "decline"): 1}


def _elicitations(server: Any) -> dict[tuple[str, str], float]:
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.token}"})
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "threadline_mcp_elicitations_total":
                counts[(sample.labels["server"], sample.labels["outcome"])] = sample.value
    return counts


def _added(server: Any, before: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    server.drain()
    after = _elicitations(server)
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_reference_servers_question_is_answered(server, fake_api, tmp_path: Path, version: str) -> None:
    fake_api.script([tool_turn("mcp__everything__trigger-elicitation-request", {}, id="toolu_b"), text_turn(["Ok."])])
    thread_id = f"t-elicit-everything-{version}"
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "ask me"}]}
    content = {"name": "Ann Example", "check": True, "integer": 7, "untitledSingleSelectEnum": "Joey"}
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        _, asked, answered = run_client(
            version,
            f"{server.url}/agui/coder",
            server.token,
            [
                first,
                {"runId": "r1", "answerAll": APPROVE},
                {"runId": "r1", "answerAll": {"status": "resolved", "payload": content}},
            ],
        )
    assert asked["error"] is None and answered["error"] is None, (asked["error"], answered["error"])
    (interrupt,) = asked["pendingInterrupts"]
    assert interrupt["reason"] == "mcp:elicitation"
    assert interrupt["metadata"]["server"] == "everything"
    assert interrupt["responseSchema"]["properties"]["email"]["format"] == "email"
    shown = _result(answered)
    assert "- Name: Ann Example" in shown and "- Favorite Integer: 7" in shown


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_revision_is_found_by_discover_or_the_handshake(server, fake_api, tmp_path: Path, revision: str) -> None:
    answer = {"status": "resolved", "payload": {"seats": 1}}
    _, _, received = _elicited(server, fake_api, tmp_path, "1", revision, answer)
    methods = [m.get("method") for m in received if m.get("method")]
    assert methods[0] == "server/discover"
    assert ("initialize" in methods) is (revision == "2025-11-25")


def test_two_questions_in_one_call_are_asked_one_after_the_other(server, fake_api, tmp_path: Path) -> None:
    fake_api.script([tool_turn("mcp__shop__book_twice", {}, id="toolu_b"), text_turn(["Done."])])
    first = {"threadId": "t-elicit-twice", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}
    seats = {"status": "resolved", "payload": {"seats": 2}}
    meal = {"status": "resolved", "payload": {"meal": "fish"}}
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        _, asked_seats, asked_meal, answered = run_client(
            "1",
            f"{server.url}/agui/coder",
            server.token,
            [
                first,
                {"runId": "r1", "answerAll": APPROVE},
                {"runId": "r1", "answerAll": seats},
                {"runId": "r1", "answerAll": meal},
            ],
        )
    assert [i["message"] for i in asked_seats["pendingInterrupts"]] == ["How many seats, and for whom?"]
    assert [i["message"] for i in asked_meal["pendingInterrupts"]] == ["Which meal?"]
    assert _result(answered) == 'book_twice done with {"seats": 2} then {"meal": "fish"}'


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_url_that_is_not_a_web_page_is_never_shown(server, fake_api, tmp_path: Path, revision: str) -> None:
    fake_api.script([tool_turn("mcp__shop__sneaky", {}, id="toolu_b"), text_turn(["Done."])])
    first = {
        "threadId": f"t-elicit-js-{revision}",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "go"}],
    }
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio(revision)}):
        _, answered = run_client(
            "1", f"{server.url}/agui/coder", server.token, [first, {"runId": "r1", "answerAll": APPROVE}]
        )
    assert answered["pendingInterrupts"] == []
    shown = _result(answered)
    if revision == "2026-07-28":
        assert "not an http(s) page" in shown
    else:  # the server's question was declined for it, and its tool said so
        assert shown == "sneaky: the person chose decline"


def test_sampling_asked_through_input_required_is_declined(server, fake_api, tmp_path: Path) -> None:
    fake_api.script([tool_turn("mcp__shop__sample", {}, id="toolu_b"), text_turn(["Done."])])
    first = {"threadId": "t-elicit-sample", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio("2026-07-28")}):
        _, answered = run_client(
            "1", f"{server.url}/agui/coder", server.token, [first, {"runId": "r1", "answerAll": APPROVE}]
        )
    assert "sampling/createMessage, which Threadline does not offer" in _result(answered)


def test_a_new_message_while_a_question_is_open_supersedes_it(server, fake_api, tmp_path: Path) -> None:
    before = _elicitations(server)
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        interrupt = elicitation_asked(server, fake_api, "t-elicit-superseded")
        fake_api.script([text_turn(["Fine, no booking."])])
        snapshot = post_run(server.url, "coder", v1(run_input("t-elicit-superseded", "r2", user("never mind", "u2"))))
        assert snapshot.types[-1] == "RUN_FINISHED"
    assert Approval.objects.get(pk=interrupt["id"]).decision == Approval.Decision.SUPERSEDED
    told = fake_api.requests[-1].body["messages"][-1]["content"]
    assert told[0]["tool_use_id"] == "toolu_b" and told[0]["is_error"] is True
    assert "the user wrote a new message instead of answering" in told[0]["content"]
    assert _added(server, before) == {("shop", "superseded"): 1}


@pytest.mark.parametrize("error_path", [False, True])
def test_the_reference_servers_url_question_carries_its_domain(server, fake_api, tmp_path: Path, error_path) -> None:
    """Both of 2025-11-25's ways: elicitation/create in URL mode, and the -32042 error naming a page
    (the call is made again once the person says they visited it; the reference server then asks
    with elicitation/create for the page its arguments name)."""
    arguments = {"url": "https://pay.example.org/checkout?id=7", "message": "Pay first.", "errorPath": error_path}
    fake_api.script(
        [tool_turn("mcp__everything__trigger-url-elicitation", arguments, id="toolu_b"), text_turn(["Ok."])]
    )
    thread_id = f"t-elicit-everything-url-{error_path}"
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "pay"}]}
    visited = {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"action": "accept"}}}
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        _, *asked, answered = run_client(
            "1",
            f"{server.url}/agui/coder",
            server.token,
            [first, {"runId": "r1", "answerAll": APPROVE}, visited, *([visited] if error_path else [])],
        )
    assert all(run["error"] is None for run in [*asked, answered])
    pages = [run["pendingInterrupts"][0]["metadata"] for run in asked]
    assert all(page["mode"] == "url" and page["domain"] == urlsplit(page["url"]).hostname for page in pages)
    assert pages[-1]["url"] == arguments["url"] and pages[-1]["domain"] == "pay.example.org"
    assert asked[-1]["pendingInterrupts"][0]["message"] == "Pay first."
    if error_path:  # first the page the -32042 error named
        assert asked[0]["pendingInterrupts"][0]["message"].startswith("Open this link to satisfy the prerequisite")
    assert _result(answered).startswith("✅ User completed the URL elicitation flow.")


def test_a_question_never_shows_the_servers_secret(server, fake_api, tmp_path: Path) -> None:
    shop = elicit_stdio(env={"TOKEN": "tok-very-secret-42"})
    with mcp_servers(server, tmp_path, {"shop": shop}):
        form = elicitation_asked(server, fake_api, "t-elicit-secret-form")
        fake_api.reset()  # its "Done." was never asked for
        page = elicitation_asked(server, fake_api, "t-elicit-secret-url", tool="sign_in")
    shown = json.dumps([form, page]) + json.dumps(list(Approval.objects.values_list("message", "elicitation")))
    assert "tok-very-secret-42" not in shown
    assert form["message"] == "How many seats, and for whom? (asked with [redacted])"
    assert form["responseSchema"]["properties"]["name"]["description"] == "your name, [redacted]"
    assert page["metadata"]["url"].endswith("&token=[redacted]")
