"""Many bash calls starting at once in one shared workspace, as the first steps of 200 runs do
(bench/rolling_restart.py): each runs, and none takes another's file. One to three of them failed
with "bash failed: NotADirectoryError: [Errno 20] Not a directory: '.../ws'" or "bash failed:
FileExistsError: [Errno 17] File exists": on uvloop, the loop ``manage.py serve`` runs, a call's
output pipe was closed twice, by libuv and then by the file object around it (MagicStack/uvloop#763),
and a worker thread that opened a file in between lost it to the second close. The size walk of the
shared workspace then read another call's pipe as the directory, and closing it took from libuv the
pipe of the call after, which libuv then refused. Run as root, with the sandbox."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import uvloop
from django.test import override_settings

from agents.runtime import tool_context
from agents.workspaces import hand_over
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH
from tests.procs import ROOT

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

CALLS = 3

# The server in miniature: bash calls one after another on uvloop, in the workspace argv[1] names.
HARNESS = f"""
import sys
from pathlib import Path
import django
django.setup()
import uvloop
from agents.runtime import tool_context
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH

async def calls():
    context = tool_context(workspace=Path(sys.argv[1]))
    for n in range({CALLS}):
        out = await ToolRegistry.of([BASH]).call("bash", {{"command": f"echo {{n}} >> c-{{n}}"}}, context)
        print(out.content, flush=True)

uvloop.run(calls())
"""


@pytest.fixture
def shared(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    with override_settings(AGENT_WORKSPACE=root, AGENT_BASH_SANDBOX="on", AGENT_BASH_NETWORK="off"):
        hand_over(root)  # as the shared workspace is at a run's start: the sandbox's user may write it
        yield root


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is missing: the test reads the server's closes")
def test_on_the_servers_loop_a_bash_call_closes_no_descriptor_twice(shared, tmp_path):
    # Which thread a second close would hurt is luck; that a second close happens is not. The loop
    # runs in the harness's main thread, whose id strace writes first on each of its lines.
    trace = tmp_path / "closes"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "AGENT_BASH_SANDBOX": "on"}
    done = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=close", "-o", str(trace), sys.executable, "-c", HARNESS, str(shared)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("[exit code 0]") == CALLS, done.stdout
    lines = trace.read_text().splitlines()
    loop_thread = lines[0].split()[0]
    closed_again = [line for line in lines if line.split()[0] == loop_thread and "EBADF" in line]
    assert closed_again == []


def test_many_bash_calls_at_once_in_one_shared_workspace_all_run(shared):
    async def calls() -> list[str]:
        context = tool_context(workspace=shared)
        registry = ToolRegistry.of([BASH])
        started = [registry.call("bash", {"command": f"echo {n} >> c-{n}"}, context) for n in range(100)]
        return [out.content for out in await asyncio.gather(*started)]

    outputs = uvloop.run(calls())
    assert [out for out in outputs if out != "(no output)\n[exit code 0]"] == []
    assert all((shared / f"c-{n}").read_text() == f"{n}\n" for n in range(100))
