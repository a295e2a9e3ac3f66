"""A server process is looked after: a cancelled call is cancelled on the server (MCP's notification),
and stopping the pool (shutdown) stops every server's process."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agents.mcp.config import parse_servers
from agents.mcp.connection import McpServer, Timeouts
from agents.mcp.pool import McpPool
from tests.mcp_world import fake_stdio, processes_naming


def _config(name: str, *args: str):
    return parse_servers({"mcpServers": {name: fake_stdio(*args)}}, source="test", environ={})[0]


async def _until(check, what: str) -> None:
    for _ in range(400):  # a bound on waiting, not a timing assertion
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{what} did not happen")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has ended (one whose parent died waits for whoever reaps orphans)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _received(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


async def test_a_cancelled_call_is_cancelled_on_the_server(tmp_path: Path) -> None:
    record = tmp_path / "received.jsonl"
    server = McpServer(_config("fake", "--record", str(record)), timeouts=Timeouts(call=60, start=10))
    server.start()
    await server.wait_started()
    assert server.up, server.last_error
    call = asyncio.create_task(server.call("slow", {}))
    await _until(lambda: any(m.get("method") == "tools/call" for m in _received(record)), "the call reaching it")
    request_id = next(m["id"] for m in _received(record) if m.get("method") == "tools/call")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await _until(
        lambda: any(m.get("method") == "notifications/cancelled" for m in _received(record)), "the cancellation"
    )
    cancelled = next(m for m in _received(record) if m.get("method") == "notifications/cancelled")
    assert cancelled["params"]["requestId"] == request_id
    await server.stop()


async def test_stopping_the_pool_stops_every_server(tmp_path: Path, settings) -> None:
    settings.DATA_DIR = tmp_path
    pool = McpPool()
    # The server's own pid is its sandbox's (a PID namespace of its own): the host's are found by name.
    markers = {name: f"--marker={tmp_path.name}-{name}" for name in ("one", "two")}
    await pool.reconcile([_config(name, marker) for name, marker in markers.items()])
    pids = []
    for name in ("one", "two"):
        result = await pool.servers[name].call("ok", {})
        assert result.content[0].text.startswith("fine")
        pids += list(processes_naming(markers[name]))
    assert len(pids) >= 2 and all(_alive(pid) for pid in pids)
    await pool.stop()
    assert not pool.servers
    # bwrap is stopped; what ran inside it dies with it (--die-with-parent), a moment later.
    for _ in range(100):
        if not any(_alive(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)
