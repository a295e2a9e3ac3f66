"""What an MCP server sends is bounded (issue #49 item 11): progress notifications are coalesced to
the latest per call, a few a second, before they become events (100,000 became 100,018 stored
events); and a large result is read in linear time with a byte bound (20 MB took 7.5 s on the event
loop, 100 MB never finished). The server is a real subprocess (tests/fakes/mcp_server.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agui_client import run_client
from tests.eventlogs import logged
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.mcp_world import fake_stdio, mcp_servers
from threads.models import Run

pytestmark = pytest.mark.clients
PROGRESS = "threadline.tool_progress"


def _run(server: Any, thread_id: str) -> dict[str, Any]:
    (result,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}],
    )
    assert result["error"] is None, result["error"]
    return result


def test_a_flood_of_progress_notifications_is_coalesced_to_the_latest(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio("--chatty")}, MCP_CALL_TIMEOUT_SECONDS=120.0):
        fake_api.script([tool_turn("mcp__fake__chatty", {"steps": 20_000}, id="toolu_p"), text_turn(["Done."])])
        result = _run(server, "t-mcp-chatty")
        server.drain()
    received = [e["value"] for e in result["received"] if e["type"] == "CUSTOM" and e["name"] == PROGRESS]
    stored = [
        json.loads(event.payload)
        for event in logged(Run.objects.get(thread__agui_thread_id="t-mcp-chatty"))
        if event.type == "CUSTOM"
    ]
    # 20,000 notifications sent as fast as a pipe takes them: far fewer events, the last one the latest.
    assert 1 <= len(received) <= 200 and len(stored) == len(received), len(received)
    assert received[-1] == {
        "toolCallId": "toolu_p",
        "toolCallName": "mcp__fake__chatty",
        "progress": 20_000,
        "total": 20_000,
        "message": "step 20000",
    }
    assert [p["progress"] for p in received] == sorted(p["progress"] for p in received)
    types = [e["type"] for e in result["received"]]
    assert (
        types.index("TOOL_CALL_END") < types.index("CUSTOM")
        and "CUSTOM" not in types[types.index("TOOL_CALL_RESULT") :]
    )
    assert fake_api.requests[1].body["messages"][-1]["content"][0]["content"] == "chatted 20000 times"


def test_a_20_mb_result_is_read_and_shaped(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio("--chatty")}, MCP_CALL_TIMEOUT_SECONDS=120.0):
        fake_api.script([tool_turn("mcp__fake__large", {"bytes": 20_000_000}, id="toolu_l"), text_turn(["Big."])])
        _run(server, "t-mcp-large")
    block = fake_api.requests[1].body["messages"][-1]["content"][0]
    assert block.get("is_error") is not True, block
    assert block["content"].startswith("line 0 ") and "line 199999 " in block["content"]


def test_an_answer_over_the_byte_bound_fails_its_call_saying_so_and_the_server_goes_on(
    server, fake_api, tmp_path: Path
) -> None:
    bound = {"MCP_MAX_MESSAGE_BYTES": 1_000_000, "MCP_CALL_TIMEOUT_SECONDS": 60.0}
    with mcp_servers(server, tmp_path, {"fake": fake_stdio("--chatty")}, **bound):
        fake_api.script(
            [
                tool_turn("mcp__fake__large", {"bytes": 5_000_000}, id="toolu_big"),
                tool_turn("mcp__fake__ok", {}, id="toolu_ok"),
                text_turn(["Done."]),
            ]
        )
        _run(server, "t-mcp-over")
    over = fake_api.requests[1].body["messages"][-1]["content"][0]
    assert over["is_error"] is True, over
    assert over["content"].startswith("MCP server 'fake' answered with a message of ")
    assert "over the bound of 1000000 (MCP_MAX_MESSAGE_BYTES); it was dropped" in over["content"]
    after = fake_api.requests[2].body["messages"][-1]["content"][0]
    assert after["content"].startswith("fine from pid ")  # the same server, not restarted
