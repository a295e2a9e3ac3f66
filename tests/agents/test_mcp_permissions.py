"""MCP tools under the same rules as the built-in ones, with the reference server over stdio through
@ag-ui/client: read-only tools (by their annotations) run, the others ask with a prompt naming the
server, the tool and its arguments; rules match the full name with globs; AGENT_MUTATING_TOOLS=off
hides the tools that are not read-only; read-only MCP tools pass the grounding gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.models import PermissionRule
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import everything_stdio, mcp_servers, mcp_tool_names
from threads.models import Approval

pytestmark = pytest.mark.clients

ASKS = "mcp__everything__toggle-simulated-logging"  # readOnlyHint false, destructiveHint false
READS = "mcp__everything__echo"  # readOnlyHint true


def _first(text: str = "go") -> dict[str, Any]:
    return {"threadId": "", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": text}]}


def _run(server: Any, thread_id: str, *later: dict[str, Any], version: str = "1") -> list[dict[str, Any]]:
    runs = [_first() | {"threadId": thread_id}, *later]
    results = run_client(version, f"{server.url}/agui/coder", server.token, runs)
    for result in results:
        assert result["error"] is None, result["error"]
    return results


@pytest.mark.parametrize("version", ["1", "0"])
def test_a_tool_that_is_not_read_only_asks_and_runs_once_approved(server, fake_api, tmp_path: Path, version) -> None:
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        fake_api.script([tool_turn(ASKS, {}, id="toolu_t"), text_turn(["Toggled."])])
        answer = {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}}
        asked, resumed = _run(server, f"t-mcp-ask-{version}", answer, version=version)
        server.drain()
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"] if version == "1" else [None]
    approval = Approval.objects.get(tool_call_id="toolu_t")
    assert approval.tool == ASKS
    assert approval.message.startswith("Allow the MCP server everything to run its tool toggle-simulated-logging?")
    assert "destructive" not in approval.message.split("\n")[0]
    if interrupt is not None:
        assert interrupt["reason"] == "confirmation" and interrupt["toolCallId"] == "toolu_t"
    result = next(e for e in resumed["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert "logging" in result["content"].lower()
    assert resumed["messages"][-1]["content"] == "Toggled."


def test_a_read_only_tool_runs_without_asking(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        fake_api.script([tool_turn(READS, {"message": "x"}, id="toolu_r"), text_turn(["Done."])])
        (result,) = _run(server, "t-mcp-ro")
    assert "pendingInterrupts" not in result or not result["pendingInterrupts"]
    assert not Approval.objects.filter(tool_call_id="toolu_r").exists()


def test_a_deny_rule_over_the_servers_tools_refuses_even_a_read_only_one(server, fake_api, tmp_path: Path) -> None:
    rule = PermissionRule(position=1, tool="mcp__everything__*", decision="deny")
    rule.full_clean()
    rule.save()
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        fake_api.script([tool_turn(READS, {"message": "x"}, id="toolu_d"), text_turn(["Refused."])])
        _run(server, "t-mcp-deny")
    block = fake_api.requests[1].body["messages"][-1]["content"][0]
    assert block["is_error"] is True and "a permission rule forbids it" in block["content"]
    assert "mcp__everything__*" in block["content"]


def test_mutating_tools_off_hides_the_tools_that_are_not_read_only(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}, AGENT_MUTATING_TOOLS="off"):
        fake_api.script([text_turn(["Nothing to do."])])
        _run(server, "t-mcp-off")
    offered = mcp_tool_names(fake_api.requests[0].body)
    assert READS in offered and "mcp__everything__get-tiny-image" in offered
    assert ASKS not in offered and "mcp__everything__gzip-file-as-resource" not in offered


def test_read_only_mcp_tools_pass_the_grounding_gate(server, fake_api, coder, tmp_path: Path) -> None:
    coder.grounding_mode = "enforced"
    coder.save()
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        fake_api.script(
            [tool_turn(READS, {"message": "x"}, id="toolu_g"), tool_turn(ASKS, {}, id="toolu_h"), text_turn(["ok"])]
        )
        _run(server, "t-mcp-gate")
    offered = mcp_tool_names(fake_api.requests[0].body)
    assert READS in offered and ASKS not in offered
    read, held = (
        fake_api.requests[1].body["messages"][-1]["content"][0],
        fake_api.requests[2].body["messages"][-1]["content"][0],
    )
    assert read["content"] == "Echo: x" and not read.get("is_error")
    assert held["is_error"] is True and "grounding gate is closed" in held["content"]
