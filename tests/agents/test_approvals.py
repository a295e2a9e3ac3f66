"""Approvals over AG-UI interrupts, through @ag-ui/client 1.0.0 and 0.0.59: nothing runs that nobody allowed."""

from __future__ import annotations

import time

import httpx
import pytest
from django.test import override_settings

from tests.agui_client import run_client
from tests.eventlogs import logged
from tests.fakes.anthropic_api import text_turn, tool_turn, tool_use, turn
from tests.helpers import eventually, run_input, user, v1
from tests.sse import EVENT, post_run
from threads.models import Approval, Message, Run

pytestmark = pytest.mark.clients
VERSIONS = ["1", "0"]
WRITE = {"path": "notes.txt", "content": "remember the milk\n"}


def _types(result):
    return [e["type"] for e in result["received"]]


def _ask_then_answer(server, fake_api, version, thread_id, answer):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Done."])])
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "note it"}]}
    # CopilotKit reuses the interrupted run's runId for the resume.
    second = {"runId": "r1", "answerAll": answer}
    results = run_client(version, f"{server.url}/agui/coder", "test-token", [first, second])
    server.drain()
    for result in results:
        assert result["error"] is None, result["error"]
        for event in result["received"]:
            EVENT.validate_python(event)
    return results


@pytest.mark.parametrize("version", VERSIONS)
def test_an_approved_call_runs_after_the_resume(server, fake_api, workspace, version):
    asked, resumed = _ask_then_answer(
        server, fake_api, version, f"t-approve-{version}", {"status": "resolved", "payload": {"approved": True}}
    )
    types = _types(asked)
    assert types[-3:] == ["MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert "TOOL_CALL_END" in types and "TOOL_CALL_RESULT" not in types
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "confirmation"
    assert interrupt["toolCallId"] == "toolu_write"
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert interrupt["expiresAt"].endswith("Z")
    assert asked["pendingInterrupts"][0]["id"] == interrupt["id"]

    types = _types(resumed)
    assert types[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert "TOOL_CALL_START" not in types  # the call is not opened again
    result = next(e for e in resumed["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_write"
    assert types[-1] == "RUN_FINISHED"
    assert (workspace / "notes.txt").read_text() == "remember the milk\n"
    metrics = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer test-token"}).text
    assert 'threadline_approvals_total{decision="yes",tool="file_write"}' in metrics
    approval = Approval.objects.get(id=interrupt["id"])
    assert approval.decision == Approval.Decision.APPROVED and approval.answered_at is not None
    assert approval.tool == "file_write" and approval.arguments == WRITE
    statuses = list(
        Run.objects.filter(thread__agui_thread_id=f"t-approve-{version}")
        .order_by("started_at")
        .values_list("status", "outcome")
    )
    # The AG-UI run that ended on the interrupt is finished once the answer continued the agent run.
    assert statuses == [(Run.Status.SUCCEEDED, "interrupt"), (Run.Status.SUCCEEDED, "success")]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_denied_call_does_not_run_and_the_model_reads_the_reason(server, fake_api, workspace, version):
    _ask_then_answer(
        server,
        fake_api,
        version,
        f"t-deny-{version}",
        {"status": "resolved", "payload": {"approved": False, "reason": "not in this folder"}},
    )
    assert not (workspace / "notes.txt").exists()
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_write" and told["is_error"] is True
    assert "the user denied this file_write call: not in this folder" in told["content"]
    assert Approval.objects.get().decision == Approval.Decision.DENIED


@pytest.mark.parametrize("version", VERSIONS)
def test_a_cancelled_interrupt_is_a_denial(server, fake_api, workspace, version):
    _ask_then_answer(server, fake_api, version, f"t-cancelled-{version}", {"status": "cancelled"})
    assert not (workspace / "notes.txt").exists()
    assert Approval.objects.get().decision == Approval.Decision.CANCELLED


def _continued_and_finished(thread_id):
    """The background run that went on from a waiting run (the sweep took it) has ended."""
    return Run.objects.filter(
        thread__agui_thread_id=thread_id, agui_run_id__endswith="-continued", finished_at__isnull=False
    ).exists()


def test_nobody_answering_in_time_fails_closed(server, fake_api, workspace):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Understood."])])
    with override_settings(APPROVAL_TIMEOUT_SECONDS=0.3):
        asked = post_run(server.url, "coder", v1(run_input("t-expiry", "r1", user("note it"))))
        assert asked.events[-1]["outcome"]["type"] == "interrupt"
    # No process waits on it: the sweep finds the deadline passed and goes on with the run.
    eventually(lambda: _continued_and_finished("t-expiry"), what="the expired run going on")
    assert not (workspace / "notes.txt").exists()
    assert Approval.objects.get().decision == Approval.Decision.TIMEOUT
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert "nobody approved this file_write call in time" in told["content"]
    # The agent run went on in a run of its own, recorded with its events.
    runs = list(Run.objects.filter(thread__agui_thread_id="t-expiry").order_by("started_at"))
    assert [(r.status, r.outcome) for r in runs] == [
        (Run.Status.SUCCEEDED, "interrupt"),
        (Run.Status.SUCCEEDED, "success"),
    ]
    assert runs[1].parent_id == runs[0].pk and len(logged(runs[1])) == runs[1].event_count


def _superseded(fake_api, workspace, interrupt_id, new_text):
    """What a superseded approval leaves: nothing ran, the model read why and then the new message."""
    assert not (workspace / "notes.txt").exists()
    approval = Approval.objects.get(id=interrupt_id)
    assert approval.decision == Approval.Decision.SUPERSEDED and new_text in approval.reason
    told = fake_api.requests[-1].body["messages"][-1]["content"]
    assert told[0]["tool_use_id"] == "toolu_write" and told[0]["is_error"] is True
    assert "the user wrote a new message instead of approving this file_write call" in told[0]["content"]
    assert told[-1] == {"type": "text", "text": new_text, "cache_control": {"type": "ephemeral"}}


def test_a_new_message_while_an_interrupt_is_open_supersedes_it_in_the_same_run(server, fake_api, workspace):
    """A CopilotKit-shaped request (no resume, the whole history) after a page lost its prompt."""
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Fine, I will not write it."])])
    asked = post_run(server.url, "coder", v1(run_input("t-open", "r1", user("note it", "u1"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    history = [m for m in asked.events if m["type"] == "MESSAGES_SNAPSHOT"][-1]["messages"]
    again = post_run(server.url, "coder", v1(run_input("t-open", "r2", *history, user("never mind that", "u2"))))
    assert again.types[0] == "RUN_STARTED" and again.types[-1] == "RUN_FINISHED"
    result = next(e for e in again.events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_write" and "TOOL_CALL_START" not in again.types[:3]
    server.drain()
    _superseded(fake_api, workspace, interrupt["id"], "never mind that")
    transcript = [
        m["role"] for m in Message.objects.filter(thread__agui_thread_id="t-open").values_list("body", flat=True)
    ]
    assert transcript == ["user", "assistant", "user", "tool", "assistant"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_reloaded_client_supersedes_an_open_approval_with_a_new_message(server, fake_api, workspace, version):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Understood, nothing written."])])
    thread_id = f"t-supersede-{version}"
    (asked,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "note it"}]}],
    )
    interrupt_id = asked["pendingInterrupts"][0]["id"]
    # A new page (its runtime restarted): it knows the messages but not the open interrupt.
    (wrote,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": thread_id,
                "runId": "r2",
                "messages": [*asked["messages"], {"id": "u2", "role": "user", "content": "do something else"}],
            }
        ],
    )
    server.drain()
    assert wrote["error"] is None, wrote["error"]
    assert wrote["messages"][-1]["content"] == "Understood, nothing written."
    _superseded(fake_api, workspace, interrupt_id, "do something else")


def test_an_answer_from_the_admin_continues_the_run_and_a_reattaching_client_sees_it(
    server, fake_api, workspace, client
):
    from django.contrib.auth.models import User

    from tests.sse import get_stream

    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Written."])])
    asked = post_run(server.url, "coder", v1(run_input("t-admin", "r1", user("note it"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    client.force_login(User.objects.create_superuser("op", "op@example.com", "a-long-password"))
    page = client.get("/admin/threads/approval/")
    assert page.status_code == 200 and b"file_write" in page.content
    response = client.post(
        "/admin/threads/approval/", {"action": "approve", "_selected_action": [interrupt["id"]]}, follow=True
    )
    assert b"Answered 1 pending approval" in response.content
    for _ in range(100):  # the waiting run takes the answer within a second
        if Run.objects.filter(thread__agui_thread_id="t-admin", agui_run_id="r1-continued").exists():
            break
        time.sleep(0.05)
    follow = get_stream(f"{server.url}/agui/coder/threads/t-admin/events")
    types = follow.types
    assert types[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert types[-1] == "RUN_FINISHED"
    assert next(e for e in follow.events if e["type"] == "TOOL_CALL_RESULT")["toolCallId"] == "toolu_write"
    server.drain()
    assert (workspace / "notes.txt").read_text() == "remember the milk\n"
    approval = Approval.objects.get(id=interrupt["id"])
    assert approval.answered_by == "op" and approval.decision == Approval.Decision.APPROVED


@pytest.mark.parametrize("version", VERSIONS)
def test_the_agent_asks_a_question_and_the_reply_is_its_tool_result(server, fake_api, version):
    fake_api.script([tool_turn("ask_user", {"question": "Which file?"}, id="toolu_ask"), text_turn(["Thanks."])])
    asked, resumed = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": f"t-ask-{version}",
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "go"}],
            },
            {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"answer": "README.md"}}},
        ],
    )
    server.drain()
    assert asked["error"] is None and resumed["error"] is None
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "input_required"
    assert interrupt["message"] == "Which file?"
    assert interrupt["responseSchema"]["required"] == ["answer"]
    result = next(e for e in resumed["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_ask" and result["content"] == "README.md"
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told == {
        "type": "tool_result",
        "tool_use_id": "toolu_ask",
        "content": "README.md",
        "cache_control": {"type": "ephemeral"},  # the end of the conversation, for the next call (#48)
    }
    assert Approval.objects.get(id=interrupt["id"]).reason == "README.md"


def _rule(position, tool, match, decision, **extra):
    from agents.models import PermissionRule

    rule = PermissionRule(position=position, tool=tool, match=match, decision=decision, **extra)
    rule.full_clean()
    rule.save()
    return rule


@pytest.mark.parametrize("version", VERSIONS)
def test_yes_always_lets_the_same_kind_of_call_run_unasked(server, fake_api, workspace, version):
    again = {"path": "notes.txt", "content": "and the bread\n"}
    fake_api.script(
        [
            tool_turn("file_write", WRITE, id="toolu_first"),
            tool_turn("file_write", again, id="toolu_second"),
            text_turn(["Both written."]),
        ]
    )
    asked, resumed = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": f"t-always-{version}",
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "note twice"}],
            },
            {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True, "always": True}}},
        ],
    )
    server.drain()
    assert asked["received"][-1]["outcome"]["type"] == "interrupt"
    assert resumed["error"] is None
    assert [e["toolCallId"] for e in resumed["received"] if e["type"] == "TOOL_CALL_RESULT"] == [
        "toolu_first",
        "toolu_second",
    ]
    assert "outcome" not in resumed["received"][-1] or resumed["received"][-1]["outcome"]["type"] == "success"
    assert (workspace / "notes.txt").read_text() == "and the bread\n"
    assert Approval.objects.count() == 1 and Approval.objects.get().always


def test_a_deny_rule_refuses_without_asking(server, fake_api, workspace):
    _rule(10, "bash", "rm *", "deny")
    fake_api.script([tool_turn("bash", {"command": "rm README.md"}, id="toolu_rm"), text_turn(["I may not."])])
    stream = post_run(server.url, "coder", v1(run_input("t-deny-rule", "r1", user("clean up"))))
    assert stream.events[-1]["type"] == "RUN_FINISHED" and stream.events[-1]["outcome"] == {"type": "success"}
    assert (workspace / "README.md").exists()
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["is_error"] and "a permission rule forbids it" in told["content"] and "rm *" in told["content"]
    assert not Approval.objects.exists()


def test_an_allow_rule_runs_a_mutating_call_unasked(server, fake_api, workspace):
    _rule(10, "file_write", "notes*", "allow")
    fake_api.script([tool_turn("file_write", WRITE), text_turn(["Noted."])])
    stream = post_run(server.url, "coder", v1(run_input("t-allow-rule", "r1", user("note it"))))
    assert stream.events[-1]["outcome"] == {"type": "success"}
    assert (workspace / "notes.txt").exists()


def test_an_ask_rule_is_a_gate_even_with_auto_approve(server, fake_api, workspace):
    _rule(10, "bash", "git push*", "ask")
    fake_api.script([tool_turn("bash", {"command": "git push origin main"})])
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        stream = post_run(server.url, "coder", v1(run_input("t-gate", "r1", user("ship it"))))
    assert stream.events[-1]["outcome"]["type"] == "interrupt"
    assert "git push*" in stream.events[-1]["outcome"]["interrupts"][0]["message"]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_answer_after_the_deadline_changes_nothing_and_shows_what_happened(server, fake_api, workspace, version):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_late"), text_turn(["I could not write it."])])
    thread_id = f"t-late-{version}"
    with override_settings(APPROVAL_TIMEOUT_SECONDS=0.3):
        (asked,) = run_client(
            version,
            f"{server.url}/agui/coder",
            "test-token",
            [
                {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "note"}]},
            ],
        )
    assert asked["received"][-1]["outcome"]["type"] == "interrupt"
    eventually(lambda: _continued_and_finished(thread_id), what="the expired run going on")
    # The page answers long after: the run is over, so the answer only brings the thread up to date.
    (late,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": thread_id,
                "runId": "r1",
                "messages": asked["messages"],
                "resume": [
                    {
                        "interruptId": asked["pendingInterrupts"][0]["id"],
                        "status": "resolved",
                        "payload": {"approved": True},
                    }
                ],
            },
        ],
    )
    assert late["error"] is None
    assert _types(late) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    tool = next(m for m in late["messages"] if m["role"] == "tool")
    assert "nobody approved this file_write call in time" in tool["content"]
    assert not (workspace / "notes.txt").exists()
    assert Approval.objects.get().decision == Approval.Decision.TIMEOUT


@pytest.mark.parametrize("version", VERSIONS)
def test_the_clients_refuse_a_new_message_while_an_interrupt_is_open(server, fake_api, workspace, version):
    fake_api.script([tool_turn("file_write", WRITE)])
    asked, refused = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": f"t-refuse-{version}",
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "note"}],
            },
            {"runId": "r2", "append": [{"id": "u2", "role": "user", "content": "hello?"}]},
        ],
    )
    assert asked["error"] is None
    assert refused["error"] is not None and refused["request"] is None  # refused before sending
    assert Approval.objects.get().decision == Approval.Decision.PENDING
    assert not (workspace / "notes.txt").exists()


def test_a_call_running_beside_an_approval_finishes_before_the_run_waits(server, fake_api, workspace):
    """Nothing of a run is left working while it waits: the allowed call beside the one that asks
    runs to its end in the first AG-UI run, and the resume gives only the approved call's result."""
    from tests.sse import post_run as post

    _rule(10, "bash", "sleep*", "allow")
    fake_api.script(
        [
            turn(
                tool_use("bash", {"command": "sleep 0.5"}, id="toolu_slow"),
                tool_use("file_write", WRITE, id="toolu_write"),
            ),
            text_turn(["Both done."]),
        ]
    )
    asked = post(server.url, "coder", v1(run_input("t-mixed", "r1", user("both"))))
    assert asked.events[-1]["outcome"]["type"] == "interrupt"
    assert [e["toolCallId"] for e in asked.events if e["type"] == "TOOL_CALL_RESULT"] == ["toolu_slow"]
    interrupt = asked.events[-1]["outcome"]["interrupts"][0]["id"]
    resumed = post(
        server.url,
        "coder",
        {
            **v1(run_input("t-mixed", "r1")),
            "resume": [{"interruptId": interrupt, "status": "resolved", "payload": {"approved": True}}],
        },
    )
    assert [e["toolCallId"] for e in resumed.events if e["type"] == "TOOL_CALL_RESULT"] == ["toolu_write"]
    assert resumed.types[-1] == "RUN_FINISHED"
    server.drain()
    results = fake_api.requests[-1].body["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_slow", "toolu_write"]
    second = Run.objects.filter(thread__agui_thread_id="t-mixed").order_by("started_at")[1]
    assert len(logged(second)) == second.event_count == len(resumed.frames)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_reloaded_page_gets_the_open_interrupt_again_and_can_answer_it(server, fake_api, workspace, version):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Done."])])
    thread_id = f"t-reload-{version}"
    run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "note"}]},
        ],
    )
    # A new page, a new agent object: it hydrates, sees the question, and answers it.
    reloaded, answered = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r-reload", "messages": []},
            {"runId": "r-reload", "answerAll": {"status": "resolved", "payload": {"approved": True}}},
        ],
    )
    server.drain()
    assert reloaded["error"] is None and answered["error"] is None
    assert _types(reloaded) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert reloaded["pendingInterrupts"][0]["toolCallId"] == "toolu_write"
    assert [m["role"] for m in reloaded["messages"]] == ["user", "assistant"]
    assert _types(answered)[-1] == "RUN_FINISHED"
    assert (workspace / "notes.txt").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_the_offline_demo_asks_an_approval_when_asked_for_a_plan(server, version):
    asked, answered = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": f"t-demo-plan-{version}",
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "Make a plan, please"}],
            },
            {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}},
        ],
    )
    server.drain()
    assert asked["error"] is None and answered["error"] is None
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "confirmation" and "todo_write" in interrupt["message"]
    assert answered["state"]["todos"][0] == {"id": "1", "content": "Read the README", "status": "completed"}
    assert [e["type"] for e in answered["received"]][-1] == "RUN_FINISHED"


def test_the_thread_takes_a_new_message_right_after_an_answered_run(server, fake_api, workspace):
    """The AG-UI run that ended on the interrupt is finished business once the answer continued
    the agent run: it must not hold the thread as if it were still running."""
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Done."]), text_turn(["Next."])])
    asked = post_run(server.url, "coder", v1(run_input("t-after-answer", "r1", user("note it", "u1"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    resumed = post_run(
        server.url,
        "coder",
        v1(
            run_input(
                "t-after-answer",
                "r1",
                resume=[{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}],
            )
        ),
    )
    assert resumed.events[-1]["type"] == "RUN_FINISHED"
    server.drain()
    after = post_run(
        server.url, "coder", v1(run_input("t-after-answer", "r2", user("note it", "u1"), user("and then?", "u2")))
    )
    assert [e["type"] for e in after.events if e["type"].startswith("RUN_")] == ["RUN_STARTED", "RUN_FINISHED"]
    statuses = sorted(Run.objects.filter(thread__agui_thread_id="t-after-answer").values_list("outcome", "status"))
    assert ("interrupt", "succeeded") in statuses and not any(status == "waiting" for _, status in statuses)
