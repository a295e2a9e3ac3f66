"""A call to a tool of an MCP server that crashed and is being started again (issue #42 item 3): it
waits for the restart within the call's timeout, or fails saying the server is restarting and when it
will be started again; never "unknown tool" for a tool the server listed. The server is a real
subprocess (tests/fakes/mcp_server.py), killed with SIGKILL; the call goes through a run."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agents.mcp.pool import mcp_pool
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually
from tests.mcp_world import fake_stdio, mcp_servers, mcp_tool_names, server_process

pytestmark = pytest.mark.clients


def _run(server: Any, thread_id: str) -> dict[str, Any]:
    (result,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}],
    )
    assert result["error"] is None, result["error"]
    return result


def _result(fake_api: Any, index: int) -> dict[str, Any]:
    block: dict[str, Any] = fake_api.requests[index].body["messages"][-1]["content"][0]
    return block


async def _state() -> str:
    return mcp_pool().servers["fake"].state.value


def _kill_the_server(server: Any, marker: str) -> int:
    """Kills the fake's process and waits until the pool has seen it exit (a few milliseconds):
    from then on the server is restarting."""
    pid = server_process(marker)
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: server.call(_state()) != "up", what="the pool seeing the server exit")
    return pid


def test_a_call_right_after_a_crash_waits_for_the_restart(server, fake_api, tmp_path: Path) -> None:
    settings = {"MCP_CALL_TIMEOUT_SECONDS": 30.0, "MCP_RESTART_BACKOFF_SECONDS": 1.5}
    marker = f"--marker={tmp_path.name}"
    with mcp_servers(server, tmp_path, {"fake": fake_stdio(marker)}, **settings):
        fake_api.script([text_turn(["ready"])])
        _run(server, "t-mcp-restart-warm")  # the pool starts the server
        old_pid = _kill_the_server(server, marker)
        fake_api.script([tool_turn("mcp__fake__ok", {}, id="toolu_r"), text_turn(["Done."])])
        _run(server, "t-mcp-restart-wait")
        new_pid = server_process(marker)
    assert "mcp__fake__ok" in mcp_tool_names(fake_api.requests[-2].body)
    block = _result(fake_api, -1)
    assert block.get("is_error") is not True, block
    assert block["content"].startswith("fine from pid ") and new_pid != old_pid


def test_a_call_that_cannot_wait_for_the_restart_says_when_it_comes(server, fake_api, tmp_path: Path) -> None:
    settings = {"MCP_CALL_TIMEOUT_SECONDS": 1.0, "MCP_RESTART_BACKOFF_SECONDS": 60.0}
    marker = f"--marker={tmp_path.name}"
    with mcp_servers(server, tmp_path, {"fake": fake_stdio(marker)}, **settings):
        fake_api.script([text_turn(["ready"])])
        _run(server, "t-mcp-restart-warm")
        _kill_the_server(server, marker)
        fake_api.script([tool_turn("mcp__fake__ok", {}, id="toolu_r"), text_turn(["Later."])])
        _run(server, "t-mcp-restart-later")
    assert "mcp__fake__ok" in mcp_tool_names(fake_api.requests[-2].body)
    block = _result(fake_api, -1)
    assert block["is_error"] is True, block
    content = block["content"]
    assert "unknown tool" not in content
    assert "MCP server 'fake' is restarting" in content and "it will be started again in" in content, content
