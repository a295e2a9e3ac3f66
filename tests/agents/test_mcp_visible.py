"""MCP servers are visible without their secrets: /agui/info lists each agent's servers with their
transport, tool count and whether they are up; the REST agent lists its tools; /metrics counts MCP
calls and failures by server and tool."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests import api_world as world
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import everything_stdio, fake_stdio, mcp_servers

pytestmark = pytest.mark.clients
AUTH = {"Authorization": "Bearer test-token"}


def test_info_lists_each_agents_servers_without_secrets(server, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TEAM_TOKEN", "team-secret-value")
    servers = {
        "everything": everything_stdio() | {"env": {"TOKEN": "${TEAM_TOKEN}"}},
        "gone": {"command": str(tmp_path / "no-such-program"), "args": ["--key", "${TEAM_TOKEN}"]},
    }
    with mcp_servers(server, tmp_path, servers, MCP_RESTART_BACKOFF_SECONDS=30.0):
        response = httpx.get(f"{server.url}/agui/info", headers=AUTH)
    (agent,) = response.json()["agents"]
    everything, gone = agent["mcpServers"]
    # 15: its two elicitation tools are listed to a client that can answer them (issue #46)
    assert everything == {"name": "everything", "transport": "stdio", "toolCount": 15, "up": True}
    assert gone == {"name": "gone", "transport": "stdio", "toolCount": 0, "up": False}
    assert "team-secret-value" not in response.text and "no-such-program" not in response.text


def test_the_rest_agent_lists_its_tools(server, tmp_path: Path) -> None:
    stranger = world.person("stranger")
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        httpx.get(f"{server.url}/agui/info", headers=AUTH)  # the servers start on first use
        tools = stranger.get("agents/coder/").json()["tools"]
    assert "file_read" in tools and "mcp__everything__echo" in tools
    assert "mcp__everything__toggle-simulated-logging" in tools


def test_metrics_count_mcp_calls_and_failures_by_server_and_tool(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio()}, MCP_RESTART_BACKOFF_SECONDS=0.05):
        fake_api.script(
            [tool_turn("mcp__fake__ok", {}, id="t1"), tool_turn("mcp__fake__crash", {}, id="t2"), text_turn(["ok"])]
        )
        (result,) = run_client(
            "1",
            f"{server.url}/agui/coder",
            server.token,
            [{"threadId": "t-mcp-metrics", "runId": "r1", "messages": [{"id": "u", "role": "user", "content": "x"}]}],
        )
        assert result["error"] is None
    metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    assert 'threadline_mcp_calls_total{outcome="ok",server="fake",tool="ok"}' in metrics
    assert 'threadline_mcp_calls_total{outcome="failed",server="fake",tool="crash"}' in metrics
    assert 'threadline_mcp_call_failures_total{server="fake",tool="crash"}' in metrics
