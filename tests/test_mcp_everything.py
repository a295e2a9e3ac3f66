"""The MCP project's reference server over stdio, driven through @ag-ui/client: its tools are
offered as mcp__everything__*, called, and each kind of result reaches the model faithfully."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import everything_stdio, mcp_servers, mcp_tool_names

pytestmark = pytest.mark.clients


def _run(server: Any, version: str, thread_id: str, text: str = "use the tools") -> dict[str, Any]:
    (result,) = run_client(
        version,
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": text}]}],
    )
    assert result["error"] is None, result["error"]
    return result


def _results(result: dict[str, Any]) -> dict[str, str]:
    return {e["toolCallId"]: e["content"] for e in result["received"] if e["type"] == "TOOL_CALL_RESULT"}


def _tool_result_block(request: Any, call_id: str) -> dict[str, Any]:
    blocks = request.body["messages"][-1]["content"]
    return next(b for b in blocks if b.get("type") == "tool_result" and b["tool_use_id"] == call_id)


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_reference_servers_tools_are_offered_and_called(server, fake_api, tmp_path: Path, version: str) -> None:
    with mcp_servers(server, tmp_path, {"everything": everything_stdio()}):
        fake_api.script(
            [tool_turn("mcp__everything__echo", {"message": "hello MCP"}, id="toolu_e"), text_turn(["Done."])]
        )
        result = _run(server, version, f"t-mcp-echo-{version}")
    offered = mcp_tool_names(fake_api.requests[0].body)
    assert "mcp__everything__echo" in offered and "mcp__everything__get-tiny-image" in offered
    echo = next(t for t in fake_api.requests[0].body["tools"] if t["name"] == "mcp__everything__echo")
    assert echo["input_schema"]["properties"]["message"]["type"] == "string"
    assert echo["description"]
    assert _results(result)["toolu_e"] == "Echo: hello MCP"
    assert _tool_result_block(fake_api.requests[1], "toolu_e")["content"] == "Echo: hello MCP"
    assert result["messages"][-1]["content"] == "Done."
