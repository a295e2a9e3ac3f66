"""MCP servers the admin holds are started by the pool like the file's, on the next run: their tools
reach the model, a disabled one's do not, and an agent that names servers gets only theirs (in its
runs, in /agui/info and in the REST agent's tools)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.exceptions import ValidationError

from agents.models import Agent
from agents.services import McpServerInUse, mcp_server_create, mcp_server_delete, mcp_server_update
from tests import api_world as world
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import _stop_servers, fake_stdio, mcp_operator, mcp_servers, mcp_tool_names

AUTH = {"Authorization": "Bearer test-token"}


@pytest.fixture
def admin_servers(server: Any) -> Iterator[None]:
    """The servers the test creates in the admin are stopped after it, on the server's loop."""
    yield
    server.drain()
    server.call(_stop_servers())


def _create(name: str, **fields: Any) -> Any:
    fake = fake_stdio()
    return mcp_server_create(
        by=mcp_operator(),
        name=name,
        transport="stdio",
        command=fake["command"],
        args=fake["args"],
        cwd=fake["cwd"],
        paths=fake["paths"],
        **fields,
    )


def _run(server: Any, thread_id: str) -> dict[str, Any]:
    (result,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u", "role": "user", "content": "go"}]}],
    )
    assert result["error"] is None, result["error"]
    return result


@pytest.mark.clients
def test_an_admin_servers_tools_reach_the_model_through_a_run(server, fake_api, admin_servers) -> None:
    _create("desk")
    fake_api.script([tool_turn("mcp__desk__ok", {}, id="toolu_d"), text_turn(["Done."])])
    result = _run(server, "t-mcp-admin")
    assert "mcp__desk__ok" in mcp_tool_names(fake_api.requests[0].body)
    answered = {e["toolCallId"]: e["content"] for e in result["received"] if e["type"] == "TOOL_CALL_RESULT"}
    assert answered["toolu_d"].startswith("fine from pid")


@pytest.mark.clients
def test_a_disabled_admin_servers_tools_do_not_reach_the_model(server, fake_api, admin_servers) -> None:
    _create("desk", enabled=False)
    fake_api.script([text_turn(["Nothing to call."])])
    _run(server, "t-mcp-admin-off")
    assert mcp_tool_names(fake_api.requests[0].body) == []


@pytest.mark.clients
def test_an_admin_edit_applies_on_the_next_run(server, fake_api, admin_servers) -> None:
    desk = _create("desk")
    fake_api.script([text_turn(["one"]), text_turn(["two"])])
    _run(server, "t-mcp-admin-edit-1")
    mcp_server_update(server=desk, by=mcp_operator(), enabled=False)
    _run(server, "t-mcp-admin-edit-2")
    assert "mcp__desk__ok" in mcp_tool_names(fake_api.requests[0].body)
    assert mcp_tool_names(fake_api.requests[1].body) == []


@pytest.mark.clients
def test_an_agent_that_names_one_server_gets_only_its_tools(server, fake_api, admin_servers, tmp_path: Path) -> None:
    _create("desk")
    with mcp_servers(server, tmp_path, {"filed": fake_stdio()}):
        coder = Agent.objects.get(name="coder")
        coder.mcp_servers = ["desk"]
        coder.full_clean()
        coder.save()
        fake_api.script([text_turn(["ok"])])
        _run(server, "t-mcp-admin-chosen")
        info = httpx.get(f"{server.url}/agui/info", headers=AUTH).json()
        tools = world.person("stranger").get("agents/coder/").json()["tools"]
    offered = mcp_tool_names(fake_api.requests[0].body)
    assert "mcp__desk__ok" in offered and not any(name.startswith("mcp__filed__") for name in offered)
    (agent,) = info["agents"]
    assert [entry["name"] for entry in agent["mcpServers"]] == ["desk"]
    assert "mcp__desk__ok" in tools and "mcp__filed__ok" not in tools


def test_an_agent_may_name_only_servers_that_exist(coder) -> None:
    _create("desk")
    coder.mcp_servers = ["desk", "nowhere"]
    with pytest.raises(ValidationError) as raised:
        coder.full_clean()
    assert raised.value.message_dict["mcp_servers"] == ["No MCP server is called 'nowhere'."]


def test_a_server_an_agent_names_is_not_deleted_and_a_rename_follows_into_the_agent(coder) -> None:
    desk = _create("desk")
    coder.mcp_servers = ["desk"]
    coder.save()
    with pytest.raises(McpServerInUse, match="coder name the MCP server 'desk'"):
        mcp_server_delete(server=desk, by=mcp_operator())
    mcp_server_update(server=desk, by=mcp_operator(), name="counter")
    coder.refresh_from_db()
    assert coder.mcp_servers == ["counter"]
    coder.mcp_servers = []
    coder.save()
    mcp_server_delete(server=desk, by=mcp_operator())
    assert not Agent.objects.get(name="coder").mcp_servers
