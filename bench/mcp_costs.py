"""What MCP servers cost (issue #26), measured against baselines taken in the same run:

- a call of an MCP tool over stdio (the suite's fake server, ``ok``; and the MCP reference server's
  ``echo`` when the test clients are installed), through the same ``ToolRegistry.call`` as every
  tool, beside the baseline: ``file_read`` of a small file, a built-in read-only tool;
- the server's start-up (its ASGI lifespan, from ``lifespan.startup`` to ``startup.complete``) with
  five stdio servers configured, beside the baseline: the same start-up with none.

Medians of ``--calls`` calls and ``--rounds`` start-ups, in milliseconds and as ratios of the baseline.

    .venv/bin/python bench/mcp_costs.py [--calls 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
FAKE = REPO / "tests" / "fakes" / "mcp_server.py"
EVERYTHING = REPO / "tests/clients/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

_DATA = tempfile.mkdtemp(prefix="threadline-bench-mcp-")
_WORK = tempfile.mkdtemp(prefix="threadline-bench-mcp-work-")
os.environ.update(
    {
        "THREADLINE_DATA_DIR": _DATA,
        "AGENT_WORKSPACE": _WORK,
        "AGENT_WORKSPACES_ROOT": os.path.join(tempfile.mkdtemp(), "ws"),
        "MCP_SERVERS": "off",
        "AGUI_TOKEN": "bench",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
)


def _servers_file(count: int) -> str:
    path = Path(_DATA) / f"mcp-{count}.json"
    servers = {f"s{i}": {"command": sys.executable, "args": [str(FAKE)]} for i in range(count)}
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


async def _median_call(registry: Any, name: str, arguments: dict[str, Any], context: Any, calls: int) -> float:
    for _ in range(20):  # warm up
        output = await registry.call(name, arguments, context)
        assert not output.is_error, output.content
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        await registry.call(name, arguments, context)
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


async def bench_calls(calls: int) -> None:
    from django.test import override_settings

    from agents.mcp.pool import mcp_servers_ready, stop_mcp_servers
    from agents.runtime import tool_context, tools_for
    from orchestrator.tools.base import ToolRegistry

    (Path(_WORK) / "small.txt").write_text("hello\n" * 20)
    context = tool_context()
    builtin = await _median_call(tools_for(), "file_read", {"path": "small.txt"}, context, calls)
    servers = {"fake": {"command": sys.executable, "args": [str(FAKE)]}}
    if EVERYTHING.is_file():
        servers["everything"] = {"command": "node", "args": [str(EVERYTHING), "stdio"]}
    path = Path(_DATA) / "calls.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    with override_settings(MCP_SERVERS=str(path)):
        pool = await mcp_servers_ready()
        registry = ToolRegistry.of(pool.tools(None))
        fake = await _median_call(registry, "mcp__fake__ok", {}, context, calls)
        everything = None
        if "everything" in servers:
            everything = await _median_call(registry, "mcp__everything__echo", {"message": "hi"}, context, calls)
        await stop_mcp_servers()
    print(f"tool call, median of {calls}:")
    print(f"  baseline file_read (built-in, read-only)   {builtin:8.3f} ms   1.00x")
    print(f"  MCP over stdio, fake server (python)       {fake:8.3f} ms   {fake / builtin:5.1f}x")
    if everything is not None:
        print(f"  MCP over stdio, reference server (node)    {everything:8.3f} ms   {everything / builtin:5.1f}x")


async def _startup_seconds(servers_file: str) -> float:
    from django.test import override_settings

    from project.asgi import _lifespan
    from runhost.host import HOST

    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    started = asyncio.Event()

    async def send(message: dict[str, str]) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    with override_settings(MCP_SERVERS=servers_file):
        lifespan = asyncio.create_task(_lifespan(inbox.get, send))
        began = time.perf_counter()
        await inbox.put({"type": "lifespan.startup"})
        await started.wait()
        took = time.perf_counter() - began
        HOST.stop_sweeper()
        from agents.mcp.pool import stop_mcp_servers

        await stop_mcp_servers()
        lifespan.cancel()
    return took


async def bench_startup(rounds: int) -> None:
    none = statistics.median([await _startup_seconds("") for _ in range(rounds)]) * 1000
    five = statistics.median([await _startup_seconds(_servers_file(5)) for _ in range(rounds)]) * 1000
    print(f"start-up (ASGI lifespan), median of {rounds}:")
    print(f"  baseline, no MCP server                     {none:8.1f} ms   1.00x")
    print(f"  five stdio MCP servers (python fake)        {five:8.1f} ms   {five / max(none, 0.001):5.0f}x")
    print(f"  so the servers add                          {five - none:8.1f} ms (started in parallel)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import django

    django.setup(set_prefix=False)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    async def both() -> None:
        await bench_calls(args.calls)
        await bench_startup(args.rounds)

    asyncio.run(both())


if __name__ == "__main__":
    main()
