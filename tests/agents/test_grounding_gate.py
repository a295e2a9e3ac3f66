"""The enforced grounding gate: what it lets through, what its prompt says, and
the report's missing_info, through the real clients."""

from __future__ import annotations

import pytest
from django.test import override_settings

from orchestrator.tools.grounding import GATE_ALLOWED_TOOLS, gate_allows
from orchestrator.tools.mutating import MUTATING_TOOLS
from orchestrator.tools.readonly import READ_ONLY_TOOLS
from orchestrator.tools.web import WEB_TOOLS
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Approval, Thread


@pytest.fixture
def enforced(coder):
    coder.grounding_mode = "enforced"
    coder.save()
    return coder


def _offered(request) -> set[str]:
    return {tool["name"] for tool in request.body["tools"]}


def test_the_gate_lets_the_seeds_list_through_and_holds_back_what_writes():
    for tool in (*READ_ONLY_TOOLS, *WEB_TOOLS):
        assert gate_allows(tool, grounded=False), tool.name
    held = {tool.name for tool in MUTATING_TOOLS if not gate_allows(tool, grounded=False)}
    assert held == {"file_write", "file_edit", "apply_patch"}
    assert {"bash", "todo_write", "ask_user", "glob", "grep", "file_read", "web_fetch"} <= GATE_ALLOWED_TOOLS
    assert all(gate_allows(tool, grounded=True) for tool in MUTATING_TOOLS)


def test_a_gated_run_is_offered_the_exploration_tools_and_told_about_the_gate(server, fake_api, enforced):
    fake_api.script([text_turn(["Looking."])])
    post_run(server.url, "coder", v1(run_input("t-gate-offer", "r1", user("look"))))
    server.drain()
    offered = _offered(fake_api.requests[0])
    assert {"bash", "todo_write", "ask_user", "glob", "grep", "file_read", "web_fetch", "grounding_report"} <= offered
    assert not offered & {"file_write", "file_edit", "apply_patch"}
    system = fake_api.requests[0].body["system"][0]["text"]
    assert "The grounding gate is ACTIVE" in system
    assert "grounding_report{understood: true" in system and "missing_info" in system
    assert "After 6 model calls the gate opens anyway" in system


def test_the_advisory_mode_asks_for_grounding_without_a_gate(server, fake_api, coder):
    coder.grounding_mode = "prompt"
    coder.save()
    fake_api.script([text_turn(["ok"])])
    post_run(server.url, "coder", v1(run_input("t-gate-advisory", "r1", user("look"))))
    server.drain()
    system = fake_api.requests[0].body["system"][0]["text"]
    assert "Grounding: before you change anything" in system and "ACTIVE" not in system
    assert "file_write" in _offered(fake_api.requests[0])


@pytest.mark.parametrize("version", ["1", "0"])
def test_an_agent_left_at_its_defaults_is_asked_to_ground_without_a_gate(server, fake_api, version):
    fake_api.script([text_turn(["ok"])])
    (result,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [{"threadId": f"t-gate-default-{version}", "runId": "r1", "messages": [user("look", "u1")]}],
    )
    server.drain()
    assert result["error"] is None
    system = fake_api.requests[0].body["system"][0]["text"]
    assert "Grounding: before you change anything" in system and "ACTIVE" not in system
    assert "grounding_report" in _offered(fake_api.requests[0])


def test_bash_under_the_gate_still_passes_its_own_approval(server, fake_api, enforced, workspace):
    fake_api.script([tool_turn("bash", {"command": "touch made.txt"}, id="toolu_bash"), text_turn(["ok"])])
    with override_settings(AGENT_MUTATING_TOOLS="ask"):
        asked = post_run(server.url, "coder", v1(run_input("t-gate-bash", "r1", user("touch"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "confirmation" and interrupt["toolCallId"] == "toolu_bash"
    assert Approval.objects.get().tool == "bash"
    assert not (workspace / "made.txt").exists()


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_missing_info_is_part_of_the_report(server, fake_api, enforced, version):
    report = {"understood": False, "missing_info": "No file mentions invoices.", "evidence": "grep found nothing"}
    fake_api.script([tool_turn("grounding_report", report, id="toolu_r"), text_turn(["I could not find it."])])
    thread_id = f"t-gate-missing-{version}"
    run = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "fix invoices"}]}
    (result,) = run_client(version, f"{server.url}/agui/coder", "test-token", [run])
    server.drain()
    assert result["error"] is None, result["error"]
    grounding = Thread.objects.get(agui_thread_id=thread_id).state["grounding"]
    assert grounding == {
        "understood": False,
        "relevantFiles": [],
        "evidence": "grep found nothing",
        "missingInfo": "No file mentions invoices.",
        "gateOpen": False,
    }
    assert result["state"]["grounding"] == grounding
