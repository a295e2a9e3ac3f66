"""An MCP call that waits for approval is a waiting run like any other: asked on one server process,
answered on another (PostgreSQL, Redis, two `manage.py serve`), which starts its own copy of the MCP
server, finds the tool under the same name and runs it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.agui_client import run_client
from tests.cluster import two_servers
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.mcp_world import everything_stdio
from tests.procs import ServerProcess

pytestmark = [pytest.mark.services, pytest.mark.clients]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeAnthropic, ServerProcess, ServerProcess]]:
    root = tmp_path_factory.mktemp("mcp-pair")
    servers_file = root / ".mcp.json"
    servers_file.write_text(json.dumps({"mcpServers": {"everything": everything_stdio()}}))
    with two_servers(root, MCP_SERVERS=str(servers_file)) as cluster:
        yield cluster.fake, cluster.a, cluster.b


@pytest.mark.parametrize("version", ["1", "0"])
def test_an_mcp_approval_asked_on_one_process_is_answered_on_another(pair, version: str) -> None:
    fake, a, b = pair
    fake.reset()
    fake.script([tool_turn("mcp__everything__toggle-simulated-logging", {}, id="toolu_m"), text_turn(["Toggled."])])
    thread_id = f"t-mcp-x-{version}"
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "toggle"}]}
    (asked,) = run_client(version, f"{a.url}/agui/coder", a.token, [first])
    assert asked["error"] is None, asked["error"]
    (pending,) = asked["pendingInterrupts"]
    assert pending["toolCallId"] == "toolu_m"
    resume = [{"interruptId": pending["id"], "status": "resolved", "payload": {"approved": True}}]
    second = {"threadId": thread_id, "runId": "r1", "messages": asked["messages"], "resume": resume}
    (answered,) = run_client(version, f"{b.url}/agui/coder", b.token, [second])
    assert answered["error"] is None, answered["error"]
    result = next(e for e in answered["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_m" and "logging" in result["content"].lower()
    assert answered["messages"][-1]["content"] == "Toggled."
