"""A sandboxed command has scratch space of its own (issue #49, item 13): run as root, the sandbox
user could write neither /tmp, /var/tmp, /dev/shm nor $HOME, so mktemp, pip and most build tools
failed. Each call now gets them private, writable, bounded, and gone when it ends: the next call
does not see them, nor does another user's."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from django.test import override_settings

from agents.runtime import tool_context
from agents.workspaces import place_of, prepare
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")


@pytest.fixture
def workspaces(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    with override_settings(
        AGENT_WORKSPACE=shared,
        AGENT_WORKSPACES_ROOT=tmp_path / "ws",
        AGENT_WORKSPACE_MODE="owner",
        AGENT_WORKSPACE_TEMPLATE="",
        AGENT_BASH_SANDBOX="on",
    ):
        alice, bob = place_of(owner_id=2, thread_pk=None), place_of(owner_id=3, thread_pk=None)
        prepare(alice)
        prepare(bob)
        yield alice.path, bob.path


def bash(workspace: Path, command: str) -> str:
    context = tool_context(workspace=workspace)
    return asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": command}, context)).content


def test_mktemp_and_every_scratch_directory_are_writable(workspaces):
    alice, _ = workspaces
    command = (
        'f=$(mktemp) && echo one > "$f" && cat "$f"; d=$(mktemp -d) && touch "$d/x" && echo dir-ok; '
        "for dir in /tmp /var/tmp /dev/shm; do echo two > $dir/probe && echo $dir-ok; done; "
        'echo three > "$HOME/.probe" && cat "$HOME/.probe"; mkdir -p ~/.cache/pip && echo home-ok; '
        'stat -c "%U %a" "$HOME"'
    )
    out = bash(alice, command)
    for expected in ("one", "dir-ok", "/tmp-ok", "/var/tmp-ok", "/dev/shm-ok", "three", "home-ok"):
        assert expected in out.splitlines(), out
    owner, mode = out.splitlines()[-2].split()
    assert mode == "700" and owner != "root", out


def test_a_later_call_does_not_see_the_scratch_files_of_an_earlier_one(workspaces):
    alice, bob = workspaces
    leave = "for dir in /tmp /var/tmp /dev/shm $HOME; do echo left-behind > $dir/alice-was-here; done; echo done"
    assert "done" in bash(alice, leave)
    look = "ls -A /tmp /var/tmp /dev/shm $HOME; cat /tmp/alice-was-here $HOME/alice-was-here 2>&1 | head -2"
    for workspace in (alice, bob):
        out = bash(workspace, look)
        assert "left-behind" not in out and "alice-was-here: No such file" in out, out
        assert "alice-was-here\n" not in out.split("cat:")[0], out


@override_settings(AGENT_BASH_SCRATCH_BYTES=4 << 20)
def test_the_scratch_space_is_bounded(workspaces):
    alice, _ = workspaces
    out = bash(alice, "head -c 8M /dev/zero > /tmp/big; echo rc=$?; head -c 8M /dev/zero > $HOME/big; echo rc=$?")
    assert "No space left on device" in out and out.count("rc=1") == 2, out
