"""Grounding modes: in enforced mode only read-only tools until the agent reports it understood."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Session, Thread

pytestmark = pytest.mark.clients
WRITE = {"path": "notes.txt", "content": "grounded\n"}
REPORT = {"understood": True, "relevant_files": ["README.md"], "evidence": "README says it is a demo"}


def _offered(request) -> list[str]:
    return [tool["name"] for tool in request.body["tools"]]


@pytest.fixture
def enforced(coder):
    coder.grounding_mode = "enforced"
    coder.save()
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        yield coder


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_gate_opens_on_an_understood_report(server, fake_api, workspace, enforced, version):
    fake_api.script(
        [
            tool_turn("file_write", WRITE, id="toolu_early"),
            tool_turn("grounding_report", REPORT),
            tool_turn("file_write", WRITE, id="toolu_late"),
            text_turn(["Done."]),
        ]
    )
    thread_id = f"t-grounded-{version}"
    (result,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "note it"}]},
        ],
    )
    server.drain()
    assert result["error"] is None
    first, _, third, _ = fake_api.requests
    assert "file_write" not in _offered(first) and "grounding_report" in _offered(first)
    assert "grounding_report" in first.body["system"][0]["text"]
    assert "file_write" in _offered(third)
    early = next(e for e in result["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert early["toolCallId"] == "toolu_early" and early["content"].startswith("not yet")
    assert (workspace / "notes.txt").read_text() == "grounded\n"
    document = Thread.objects.get(agui_thread_id=thread_id).state
    assert document["grounding"] == {
        "understood": True,
        "relevantFiles": ["README.md"],
        "evidence": "README says it is a demo",
        "gateOpen": True,
    }
    assert result["state"] == document


def test_a_question_in_the_report_is_put_to_the_user(server, fake_api, enforced):
    fake_api.script(
        [
            tool_turn("grounding_report", {"understood": False, "question": "Which notes file?"}, id="toolu_q"),
            text_turn(["Thanks."]),
        ]
    )
    asked = post_run(server.url, "coder", v1(run_input("t-ground-q", "r1", user("note it"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "input_required" and interrupt["message"] == "Which notes file?"
    answered = post_run(
        server.url,
        "coder",
        {
            **v1(run_input("t-ground-q", "r1")),
            "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"answer": "notes.txt"}}],
        },
    )
    result = next(e for e in answered.events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_q" and result["content"] == "notes.txt"
    assert "file_write" not in _offered(fake_api.requests[-1])  # still not grounded


@pytest.mark.parametrize("version", ["1", "0"])
def test_with_human_in_the_loop_off_a_question_in_the_report_is_not_asked(server, fake_api, enforced, version, caplog):
    """Where nobody watches the chat, the report's question is recorded as what is missing and the
    model is told to go on; the run ends without an interrupt for a person who is not there."""
    fake_api.script(
        [
            tool_turn("grounding_report", {"understood": False, "question": "Which notes file?"}, id="toolu_q"),
            text_turn(["Could not tell which notes file; nothing was changed."]),
        ]
    )
    with override_settings(AGUI_HUMAN_IN_THE_LOOP=False):
        (result,) = run_client(
            version,
            f"{server.url}/agui/coder",
            "test-token",
            [{"threadId": f"t-ground-unattended-{version}", "runId": "r1", "messages": [user("note it", "u1")]}],
        )
    server.drain()
    assert result["error"] is None and result["pendingInterrupts"] == []
    assert result["received"][-1]["type"] == "RUN_FINISHED" and "interrupts" not in str(result["received"][-1])
    told = next(e for e in result["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert told["toolCallId"] == "toolu_q" and "nobody can answer questions" in told["content"]
    assert result["messages"][-1]["content"] == "Could not tell which notes file; nothing was changed."
    grounding = Thread.objects.get(agui_thread_id=f"t-ground-unattended-{version}").state["grounding"]
    assert grounding["missingInfo"] == "Which notes file?" and "question" not in grounding
    # The run's log line names its scenario (a scenario's name is for logs and surfaces).
    assert f"run r1 of thread t-ground-unattended-{version}: agent coder, scenario unattended" in caplog.text


def test_the_gate_opens_anyway_after_its_iterations(server, fake_api, enforced):
    fake_api.script([tool_turn("glob", {"pattern": "*"}), tool_turn("grep", {"pattern": "x"}), text_turn(["ok"])])
    with override_settings(GROUNDING_MAX_ITERATIONS=2):
        post_run(server.url, "coder", v1(run_input("t-ground-n", "r1", user("go"))))
    assert ["file_write" in _offered(r) for r in fake_api.requests] == [False, False, True]


def test_a_session_can_override_the_agents_mode(server, fake_api, enforced):
    fake_api.script([text_turn(["hi"]), text_turn(["again"])])
    post_run(server.url, "coder", v1(run_input("t-ground-o", "r1", user("one", "u1"))))
    server.drain()
    Session.objects.filter(thread__agui_thread_id="t-ground-o").update(grounding_override="off")
    post_run(server.url, "coder", v1(run_input("t-ground-o", "r2", user("one", "u1"), user("two", "u2"))))
    assert "file_write" not in _offered(fake_api.requests[0])
    assert "file_write" in _offered(fake_api.requests[1]) and "grounding_report" not in _offered(fake_api.requests[1])
