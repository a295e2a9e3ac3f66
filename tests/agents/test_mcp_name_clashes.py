"""MCP tool names that sanitise alike across servers (issue #49 item 10): server ``x``'s tool ``_y``
and server ``x_``'s tool ``y`` were both ``mcp__x___y``, so an allow rule written for the first ran
the second (marked destructive) without asking whenever the first was not offered. Each pair now has a
name of its own, whichever servers run (agents/mcp/names.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.mcp.names import model_name
from agents.models import PermissionRule
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import fake_stdio, mcp_servers, mcp_tool_names

pytestmark = pytest.mark.clients
ALLOWED = "mcp__x___y"  # the rule's tool: server x's "_y"


def _run(server: Any, thread_id: str) -> dict[str, Any]:
    (result,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}],
    )
    assert result["error"] is None, result["error"]
    return result


def _allow_x_underscore_y() -> None:
    rule = PermissionRule(position=1, tool=ALLOWED, decision="allow")
    rule.full_clean()
    rule.save()


def test_an_allow_rule_for_one_servers_tool_never_runs_anothers(server, fake_api, tmp_path: Path) -> None:
    _allow_x_underscore_y()
    record = tmp_path / "x_.jsonl"
    servers = {"x_": fake_stdio("--destructive", "y", "--record", str(record))}  # server x is not configured
    with mcp_servers(server, tmp_path, servers):
        fake_api.script([tool_turn(ALLOWED, {}, id="toolu_c"), text_turn(["Done."])])
        result = _run(server, "t-mcp-clash-alone")
    assert ALLOWED not in mcp_tool_names(fake_api.requests[0].body)
    assert model_name("x_", "y") in mcp_tool_names(fake_api.requests[0].body)
    block = fake_api.requests[1].body["messages"][-1]["content"][0]
    assert block["is_error"] is True and "unknown tool" in block["content"], block
    assert "y ran" not in block["content"]
    assert not [m for m in record.read_text().splitlines() if '"tools/call"' in m]
    assert not result.get("pendingInterrupts")


def test_both_servers_tools_are_offered_apart_and_only_the_allowed_one_runs_unasked(
    server, fake_api, tmp_path: Path
) -> None:
    _allow_x_underscore_y()
    servers = {"x": fake_stdio("--destructive", "_y"), "x_": fake_stdio("--destructive", "y")}
    other = model_name("x_", "y")
    with mcp_servers(server, tmp_path, servers):
        fake_api.script([tool_turn(ALLOWED, {}, id="toolu_a"), text_turn(["Ran."])])
        _run(server, "t-mcp-clash-allowed")
        fake_api.script([tool_turn(other, {}, id="toolu_b"), text_turn(["Never."])])
        asked = _run(server, "t-mcp-clash-asks")
    offered = mcp_tool_names(fake_api.requests[0].body)
    assert ALLOWED in offered and other in offered and other != ALLOWED
    assert fake_api.requests[1].body["messages"][-1]["content"][0]["content"] == "_y ran"
    (interrupt,) = asked["received"][-1]["outcome"]["interrupts"]
    assert interrupt["message"].startswith("Allow the MCP server x_ to run its tool y?")
