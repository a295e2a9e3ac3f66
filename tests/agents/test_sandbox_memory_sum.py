"""bash's memory bound holds for the sum of a call's processes (issue #49, item 4): RLIMIT_AS bounds
each process, and eight processes of 400 MiB each ran under a 512 MiB bound. Where the host gives
the server a cgroup (root here, with cgroup v1 memory and pids hierarchies, as on CI), each call
runs in a group of its own; where it does not, start-up says the bound is per process and states
the worst case."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from django.test import override_settings

from agents.confinement import bash_choice
from agents.runtime import tool_context
from agents.workspaces import place_of, prepare
from orchestrator.tools import cgroups
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

BOUND = 256 << 20
EACH_MIB = 64
# Each child takes EACH_MIB, touches every page, and holds it for a while; those still alive then
# say so. Eight of them need 512 MiB, twice the bound.
HOLD = (
    "import time\n"
    f"block = bytearray({EACH_MIB} << 20)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "time.sleep(3)\n"
    "print('survived', flush=True)\n"
)


def _cgroups_here() -> str | None:
    """None when this host gives the server a cgroup to divide; else why not."""
    found = cgroups.find_parents()
    return found if isinstance(found, str) else None


@pytest.fixture
def workspace(tmp_path: Path, db):
    shared = tmp_path / "shared"
    shared.mkdir()
    with override_settings(
        AGENT_WORKSPACE=shared,
        AGENT_WORKSPACES_ROOT=tmp_path / "ws",
        AGENT_WORKSPACE_MODE="owner",
        AGENT_WORKSPACE_TEMPLATE="",
        AGENT_BASH_SANDBOX="on",
        AGENT_BASH_MAX_MEMORY_BYTES=BOUND,
    ):
        place = place_of(owner_id=2, thread_pk=None)
        prepare(place)
        yield place.path


def bash(workspace: Path, command: str) -> str:
    context = tool_context(workspace=workspace)
    return asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": command}, context)).content


def eight_holders(workspace: Path) -> str:
    (workspace / "hold.py").write_text(HOLD)
    return bash(workspace, "for i in 1 2 3 4 5 6 7 8; do python3 hold.py & done; wait; echo done")


def test_eight_processes_under_a_bound_smaller_than_their_sum_are_stopped(workspace):
    why = _cgroups_here()
    if why is not None:
        print(f"\n*** NO CGROUP ON THIS HOST: the sum of a call's processes is NOT bounded here ({why}) ***")
        pytest.skip(f"no cgroup to bound the sum of a call's processes on this host: {why}")
    assert "for all of a call's processes together" in bash_choice().note
    out = eight_holders(workspace)
    survived = out.count("survived")
    # 256 MiB hold three of them with their interpreters, never eight.
    assert survived <= 3, out
    assert "passed the call's memory bound of 256 MiB" in out, out


def test_without_a_cgroup_start_up_states_the_per_process_bound_and_its_worst_case(workspace):
    with override_settings(AGENT_BASH_CGROUP="off"):
        note = bash_choice().note
        assert "EACH, not in sum" in note and "256 x 256 MiB = 65536 MiB" in note, note
        # What the fallback is: each process is bounded, their sum is not.
        assert eight_holders(workspace).count("survived") == 8


def test_a_call_leaves_no_group_behind(workspace):
    found = cgroups.find_parents()
    if isinstance(found, str):
        pytest.skip(f"no cgroup on this host: {found}")
    assert "done" in bash(workspace, "sleep 0.2 & echo done")
    for base in (found.memory, found.pids):
        assert not [path for path in base.iterdir() if path.name.startswith(cgroups.PREFIX)]
