"""What an MCP server's question mid-call costs the MCP side (issue #46), against a baseline measured
in the same run: a plain call of the suite's fake server (``ok``, answered at once).

- **asked**: a call whose server asks (``book`` on tests/fakes/elicit_mcp_server.py): on 2025-11-25
  the question arrives, the call is cancelled and the question answered ``cancel``; on 2026-07-28 the
  call answers ``input_required``. Either way the call returns the question for the run to wait on.
- **answered**: the call made again once the person answered: on 2025-11-25 a new call whose
  repeated question gets the stored answer; on 2026-07-28 the retry with ``inputResponses``.

Medians of ``--calls`` calls over stdio, outside the sandbox (the protocol's cost, not bwrap's), in
milliseconds and as ratios of the baseline.

    .venv/bin/python bench/mcp_elicitation.py [--calls 200]
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
FAKES = REPO / "tests" / "fakes"

_DATA = tempfile.mkdtemp(prefix="threadline-bench-elicit-")
os.environ.update(
    {
        "THREADLINE_DATA_DIR": _DATA,
        "AGENT_WORKSPACE": tempfile.mkdtemp(prefix="threadline-bench-elicit-work-"),
        "AGENT_WORKSPACES_ROOT": os.path.join(tempfile.mkdtemp(), "ws"),
        "MCP_SERVERS": "off",
        "MCP_SANDBOX": "off",
        "AGUI_TOKEN": "bench",
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
)


async def _median(registry: Any, name: str, context: Any, calls: int, inputs: Any = None) -> tuple[float, Any]:
    times, output = [], None
    for n in range(calls + 10):  # the first ten warm up
        if inputs is not None:
            context.inputs["bench"] = inputs
        began = time.perf_counter()
        output = await registry.call(name, {}, context, "bench")
        if n >= 10:
            times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000, output


async def bench(calls: int) -> None:
    from django.test import override_settings

    from agents.mcp.pool import mcp_servers_ready, stop_mcp_servers
    from agents.runtime import tool_context
    from orchestrator.tools.base import ToolRegistry
    from orchestrator.tools.inputs import CallInputs

    elicit = str(FAKES / "elicit_mcp_server.py")
    servers = {
        "fake": {"command": sys.executable, "args": [str(FAKES / "mcp_server.py")]},
        "older": {"command": sys.executable, "args": [elicit, "--revision", "2025-11-25"]},
        "newer": {"command": sys.executable, "args": [elicit, "--revision", "2026-07-28"]},
    }
    path = Path(_DATA) / "servers.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    context = tool_context()
    rows: list[tuple[str, float]] = []
    with override_settings(MCP_SERVERS=str(path)):
        pool = await mcp_servers_ready()
        registry = ToolRegistry.of(pool.tools(None))
        baseline, _ = await _median(registry, "mcp__fake__ok", context, calls)
        for server in ("older", "newer"):
            took, output = await _median(registry, f"mcp__{server}__book", context, calls)
            asked = output.needs_input
            assert asked is not None, output.content
            answer = asked.answered("accept", {"seats": 2})
            inputs = CallInputs((answer,), asked.state)
            again, output = await _median(registry, f"mcp__{server}__book", context, calls, inputs)
            assert output.needs_input is None and "seats" in output.content, output.content
            rows += [(f"{server}: the call that asks", took), (f"{server}: the call made again, answered", again)]
        await stop_mcp_servers()
    print(f"MCP calls over stdio, median of {calls}:")
    print(f"  baseline: a plain call (fake server, ok)              {baseline:8.3f} ms   1.00x")
    for label, took in rows:
        print(f"  {label:<52} {took:8.3f} ms   {took / baseline:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    import django

    django.setup(set_prefix=False)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    asyncio.run(bench(args.calls))


if __name__ == "__main__":
    main()
