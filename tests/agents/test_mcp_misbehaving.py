"""A misbehaving MCP server (tests/fakes/mcp_server.py, at the protocol edge): it hangs, crashes
mid-call, writes garbage, lists 500 tools, returns 10 MB, asks for sampling. Each call gets a tool
error the model can read (or a shaped result), the server is started again, and the others work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.mcp.pool import mcp_pool
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually
from tests.mcp_world import everything_stdio, fake_stdio, mcp_servers, mcp_tool_names

pytestmark = pytest.mark.clients
FAST = {"MCP_CALL_TIMEOUT_SECONDS": 1.0, "MCP_RESTART_BACKOFF_SECONDS": 0.05, "MCP_START_TIMEOUT_SECONDS": 10.0}


def _run(server: Any, thread_id: str) -> dict[str, Any]:
    (result,) = run_client(
        "1",
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}],
    )
    assert result["error"] is None, result["error"]
    return result


def _block(fake_api: Any, index: int) -> dict[str, Any]:
    return fake_api.requests[index].body["messages"][-1]["content"][0]


async def _state(name: str) -> tuple[str, int, str]:
    server = mcp_pool().servers[name]
    return server.state.value, server.restarts, server.last_error


def _up_again(server: Any, name: str) -> None:
    def restarted() -> bool:
        state, restarts, _ = server.call(_state(name))
        return state == "up" and restarts >= 1

    eventually(restarted, what=f"MCP server {name} started again")


@pytest.mark.parametrize(
    ("tool", "said"),
    [
        ("hang", "did not answer within 1 s"),
        ("crash", "went away during the call"),
        ("garbage", "went away during the call"),
    ],
)
def test_a_broken_call_is_a_tool_error_and_the_server_comes_back(server, fake_api, tmp_path: Path, tool, said) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio()}, **FAST):
        fake_api.script([tool_turn(f"mcp__fake__{tool}", {}, id="toolu_b"), text_turn(["Broken."])])
        _run(server, f"t-mcp-{tool}")
        block = _block(fake_api, 1)
        assert block["is_error"] is True and said in block["content"], block
        _up_again(server, "fake")
        fake_api.script([tool_turn("mcp__fake__ok", {}, id="toolu_ok"), text_turn(["Fine."])])
        _run(server, f"t-mcp-{tool}-after")
        assert _block(fake_api, -1)["content"].startswith("fine from pid")


def test_a_server_that_is_down_fails_its_calls_at_once_and_the_others_work(server, fake_api, tmp_path: Path) -> None:
    servers = {"gone": {"command": str(tmp_path / "no-such-program")}, "everything": everything_stdio()}
    with mcp_servers(server, tmp_path, servers, **FAST):
        fake_api.script(
            [tool_turn("mcp__everything__echo", {"message": "still here"}, id="toolu_e"), text_turn(["ok"])]
        )
        _run(server, "t-mcp-down")
        state, _, error = server.call(_state("gone"))
    assert state in ("down", "starting") and "not found" in error
    assert not any(name.startswith("mcp__gone__") for name in mcp_tool_names(fake_api.requests[0].body))
    assert _block(fake_api, 1)["content"] == "Echo: still here"


def test_a_server_listing_500_tools_is_cut_to_200(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio("--tools", "500")}, **FAST):
        fake_api.script([text_turn(["ok"])])
        _run(server, "t-mcp-500")
        _, _, error = server.call(_state("fake"))
    offered = mcp_tool_names(fake_api.requests[0].body)
    assert len(offered) == 200 and len(set(offered)) == 200
    assert "lists 509 tools; only the first 200 are offered" in error


def test_a_10_mb_result_is_shaped_like_any_tools(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio()}, **(FAST | {"MCP_CALL_TIMEOUT_SECONDS": 120.0})):
        fake_api.script([tool_turn("mcp__fake__huge", {}, id="toolu_h"), text_turn(["Big."])])
        result = _run(server, "t-mcp-huge")
    content = _block(fake_api, 1)["content"]
    assert len(content.encode()) < 60_000
    assert content.startswith("line 0 ") and "line 99999 " in content
    assert "lines omitted" in content or "omitted" in content
    shown = next(e for e in result["received"] if e["type"] == "TOOL_CALL_RESULT")["content"]
    assert shown == content


def test_sampling_is_declined_with_a_message(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio()}, **FAST):
        fake_api.script([tool_turn("mcp__fake__sample", {}, id="toolu_s"), text_turn(["ok"])])
        _run(server, "t-mcp-sample")
    content = _block(fake_api, 1)["content"]
    assert content.startswith("sampling answered: ") and "Sampling not supported" in content


def test_a_changed_tool_list_is_read_again(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"fake": fake_stdio()}, **FAST):
        fake_api.script([tool_turn("mcp__fake__change", {}, id="toolu_c"), text_turn(["ok"])])
        _run(server, "t-mcp-change")
        assert "mcp__fake__added" not in mcp_tool_names(fake_api.requests[0].body)

        async def listed() -> list[str]:
            return [tool.name for tool in mcp_pool().servers["fake"].tools]

        eventually(lambda: "added" in server.call(listed()))
        fake_api.script([text_turn(["ok"])])
        _run(server, "t-mcp-change-2")
        assert "mcp__fake__added" in mcp_tool_names(fake_api.requests[-1].body)


def test_a_destructive_tools_approval_says_so(server, fake_api, tmp_path: Path) -> None:
    from threads.models import Approval

    with mcp_servers(server, tmp_path, {"fake": fake_stdio()}, **FAST):
        fake_api.script([tool_turn("mcp__fake__wipe", {"target": "prod"}, id="toolu_w"), text_turn(["ok"])])
        result = _run(server, "t-mcp-wipe")
    (interrupt,) = result["received"][-1]["outcome"]["interrupts"]
    first, *rest = interrupt["message"].split("\n")
    assert first.startswith(
        "Allow the MCP server fake to run its tool wipe? The server marks this tool as destructive."
    )
    assert rest == ["  target: prod"]
    assert Approval.objects.get(tool_call_id="toolu_w").tool == "mcp__fake__wipe"


def test_cancelling_the_run_cancels_its_mcp_call_on_the_server(server, fake_api, tmp_path: Path) -> None:
    # A person's cancel stops an MCP call in flight at once (MCP's notifications/cancelled), rather
    # than at the run's next safe point after the call; the call is a tool error the run records.
    import threading

    import httpx

    from tests.helpers import run_input, user, v1
    from tests.sse import post_run

    record = tmp_path / "received.jsonl"

    def received() -> list[dict[str, Any]]:
        import json

        return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []

    settings = {**FAST, "MCP_CALL_TIMEOUT_SECONDS": 60.0}
    with mcp_servers(server, tmp_path, {"fake": fake_stdio("--record", str(record))}, **settings):
        fake_api.script([tool_turn("mcp__fake__slow", {}, id="toolu_slow"), text_turn(["Never."])])
        holder: dict[str, Any] = {}
        body = v1(run_input("t-mcp-cancel", "r1", user("go")))
        thread = threading.Thread(target=lambda: holder.update(stream=post_run(server.url, "coder", body)))
        thread.start()
        eventually(
            lambda: any(m.get("method") == "tools/call" for m in received()), what="the call reaching the server"
        )
        cancel = httpx.post(
            f"{server.url}/agui/coder/threads/t-mcp-cancel/runs/r1/cancel",
            headers={"Authorization": "Bearer test-token"},
            timeout=10,
        )
        assert cancel.status_code == 202, cancel.text
        thread.join(30)
        assert not thread.is_alive()
        events = holder["stream"].events
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["outcome"] == {"type": "cancelled"}
        result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
        assert "the run was cancelled" in result["content"]
        request_id = next(m["id"] for m in received() if m.get("method") == "tools/call")
        eventually(
            lambda: any(
                m.get("method") == "notifications/cancelled" and m["params"]["requestId"] == request_id
                for m in received()
            ),
            what="the server told of the cancel",
        )
