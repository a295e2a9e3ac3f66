"""A server starting up removes the call groups a killed server left behind, and never the group of
another live server's call in the moment between its making and its process joining it (found by
the network-grant test: a restarted process removed the other's group, and its bash call failed
with "cgroup.procs: Directory nonexistent")."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from orchestrator.tools import cgroups


@pytest.fixture
def parents() -> cgroups.CgroupParents:
    found = cgroups.find_parents()
    if isinstance(found, str):
        pytest.skip(f"this host gives the server no cgroup to divide: {found}")
    return found


def test_a_group_just_made_for_a_call_is_not_taken_for_a_leftover(parents: cgroups.CgroupParents) -> None:
    group = cgroups.open_call_group(parents, memory=64 << 20, processes=16)
    try:
        cgroups.remove_leftovers(parents)  # another server starting up now
        assert all(path.is_dir() for path in group.dirs)
        done = subprocess.run(group.join_argv(["/bin/cat", "/proc/self/cgroup"]), capture_output=True, check=False)
        assert done.returncode == 0 and group.dirs[0].name in done.stdout.decode(), done.stderr
    finally:
        group.remove()


def test_an_empty_group_left_behind_is_removed(parents: cgroups.CgroupParents) -> None:
    group = cgroups.open_call_group(parents, memory=64 << 20, processes=16)
    try:
        past = time.time() - cgroups.LEFTOVER_SECONDS - 1
        for path in group.dirs:
            os.utime(path, (past, past))
        cgroups.remove_leftovers(parents)
        assert not any(path.exists() for path in group.dirs)
    finally:
        group.remove()
