"""An MCP call that waits for approval is a waiting run like any other: asked on one server process,
answered on another (PostgreSQL, Redis, two `manage.py serve`), which starts its own copy of the MCP
server, finds the tool under the same name and runs it. So is an MCP server's question mid-call
(elicitation, issue #46), even when the process that asked it was killed."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.agui_client import run_client
from tests.cluster import started_cluster
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.mcp_world import elicit_stdio, everything_stdio
from tests.procs import ServerProcess

pytestmark = [pytest.mark.services, pytest.mark.clients]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeAnthropic, ServerProcess, ServerProcess]]:
    servers_file = tmp_path_factory.mktemp("mcp-servers") / ".mcp.json"
    servers = {"everything": everything_stdio(), "shop": elicit_stdio("2026-07-28")}
    servers_file.write_text(json.dumps({"mcpServers": servers}))
    for cluster in started_cluster(tmp_path_factory, "mcp-pair", MCP_SERVERS=str(servers_file)):
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


ELICITING = {
    # The reference server, of the handshake era: the call made again on B gets the stored answer.
    "everything": ("mcp__everything__trigger-elicitation-request", {"name": "Ann Example"}, "- Name: Ann Example"),
    # A server of ours on 2026-07-28: B's retried call carries inputResponses and the requestState.
    "shop": ("mcp__shop__book", {"seats": 3}, 'book done with {"seats": 3}'),
}


@pytest.mark.parametrize("server", sorted(ELICITING))
@pytest.mark.parametrize("version", ["1", "0"])
def test_an_mcp_question_asked_on_a_killed_process_is_answered_on_another(pair, version: str, server: str) -> None:
    fake, a, b = pair
    if a.proc is None or a.proc.poll() is not None:
        a.start()
    fake.reset()
    tool, content, shown = ELICITING[server]
    fake.script([tool_turn(tool, {}, id="toolu_q"), text_turn(["Answered."])])
    thread_id = f"t-mcp-q-{server}-{version}"
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "ask me"}]}
    approve = {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}}
    _, asked = run_client(version, f"{a.url}/agui/coder", a.token, [first, approve])
    assert asked["error"] is None, asked["error"]
    (pending,) = asked["pendingInterrupts"]
    assert pending["reason"] == "mcp:elicitation" and pending["metadata"]["server"] == server
    a.kill()  # kill -9: the MCP session that asked is gone with it
    resume = [{"interruptId": pending["id"], "status": "resolved", "payload": content}]
    second = {"threadId": thread_id, "runId": "r1", "messages": asked["messages"], "resume": resume}
    (answered,) = run_client(version, f"{b.url}/agui/coder", b.token, [second])
    assert answered["error"] is None, answered["error"]
    result = next(e for e in answered["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_q" and shown in result["content"]
    assert answered["messages"][-1]["content"] == "Answered."
