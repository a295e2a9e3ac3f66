"""Wherever the workspaces lie, a user's bash sees that user's workspace and no other (issue #49,
item 1). The probe put them under /opt, which the sandbox shows read-only: bob's bash then read
alice's workspace and the shared one. Here alice, bob and the shared workspace live under /opt,
/usr/local and /etc, and bob's bash tries them by name, by grep and find, through /proc/self/root,
through a link he makes and through ``..``. A layout the sandbox cannot hide stops start-up."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.test import override_settings

from agents.confinement import bash_choice
from agents.runtime import tool_context
from agents.workspaces import Place, place_of, prepare
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH
from tests.procs import ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap, and root to make directories under /opt and /usr/local",
)

ALICE_SECRET = "alice-private-7d2e"
SHARED_SECRET = "shared-private-91ab"
TOKEN_SECRET = "token-private-c04f"


def _pattern(secret: str) -> str:
    """The secret as a grep pattern that does not match its own text (grep reads its own command line)."""
    return f"{secret[:-1]}[{secret[-1]}]"


@dataclass(slots=True, frozen=True)
class Layout:
    base: Path
    alice: Place
    bob: Place
    shared: Path
    data: Path


@pytest.fixture(params=["/opt", "/usr/local", "/etc"])
def layout(request: pytest.FixtureRequest) -> Iterator[Layout]:
    base = Path(tempfile.mkdtemp(prefix="threadline-test-", dir=request.param))
    try:
        base.chmod(0o755)
        shared, data = base / "shared", base / "data"
        shared.mkdir()
        data.mkdir()
        (shared / "plans.txt").write_text(SHARED_SECRET)
        (data / "agui-token").write_text(TOKEN_SECRET)
        with override_settings(
            AGENT_WORKSPACES_ROOT=base / "ws",
            AGENT_WORKSPACE=shared,
            DATA_DIR=data,
            AGENT_WORKSPACE_MODE="owner",
            AGENT_WORKSPACE_TEMPLATE="",
            AGENT_BASH_SANDBOX="on",
        ):
            alice, bob = place_of(owner_id=2, thread_pk=None), place_of(owner_id=3, thread_pk=None)
            prepare(alice)
            prepare(bob)
            prepare(place_of(owner_id=None, thread_pk=None))
            (alice.path / "notes.txt").write_text(ALICE_SECRET)
            yield Layout(base, alice, bob, shared, data)
    finally:
        shutil.rmtree(base)


def bash(workspace: Path, command: str) -> str:
    context = tool_context(workspace=workspace)
    return asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": command}, context)).content


def test_bobs_bash_cannot_reach_alices_workspace_nor_the_shared_one(layout):
    alice, shared, data = layout.alice.path, layout.shared, layout.data
    probes = [
        f"cat {alice}/notes.txt {shared}/plans.txt {data}/agui-token 2>&1",
        f"cat /proc/self/root{alice}/notes.txt /proc/1/root{alice}/notes.txt 2>&1",
        f"cat ../{alice.name}/notes.txt ../../../shared/plans.txt 2>&1",
        f"ln -s {alice} alice; ln -s {shared} shared; cat alice/notes.txt shared/plans.txt 2>&1; rm -f alice shared",
        f"grep -rIs -e '{_pattern(ALICE_SECRET)}' -e '{_pattern(SHARED_SECRET)}' -e '{_pattern(TOKEN_SECRET)}' "
        f"{layout.base} .. /opt /usr/local /tmp /var/tmp",
    ]
    out = "\n".join(bash(layout.bob.path, probe) for probe in probes)
    for secret in (ALICE_SECRET, SHARED_SECRET, TOKEN_SECRET):
        assert secret not in out, out
    # What bob can list of the layout: his own workspace, in otherwise empty directories.
    listing = bash(layout.bob.path, f"cd {layout.base}; find . -mindepth 1 | sort")
    assert listing.splitlines()[:-1] == ["./data", "./shared", "./ws", "./ws/users", "./ws/users/3"], listing
    found = bash(layout.bob.path, "find / -path /proc -prune -o -path /sys -prune -o -name '*.txt' -print 2>/dev/null")
    assert "notes.txt" not in found and "plans.txt" not in found, found


def test_each_user_still_reads_and_writes_their_own_workspace(layout):
    out = bash(layout.alice.path, "cat notes.txt; echo more > more.txt; echo rc=$?")
    assert ALICE_SECRET in out and "rc=0" in out, out
    assert (layout.alice.path / "more.txt").read_text() == "more\n"


def test_the_shared_workspaces_bash_cannot_reach_the_users_workspaces(layout):
    command = f"cat plans.txt; echo; ls -A {layout.base / 'ws'} | wc -l; cat {layout.alice.path}/notes.txt"
    out = bash(layout.shared, command)
    assert out.splitlines()[:2] == [SHARED_SECRET, "0"], out
    assert ALICE_SECRET not in out, out


@pytest.mark.parametrize(
    ("name", "value"),
    [("AGENT_WORKSPACES_ROOT", "/usr"), ("AGENT_WORKSPACES_ROOT", "/"), ("AGENT_WORKSPACE", "/etc")],
)
def test_a_layout_the_sandbox_cannot_hide_stops_start_up_naming_it(tmp_path, name, value):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "THREADLINE_DATA_DIR": str(tmp_path / "data"),
        "AGENT_WORKSPACE": str(tmp_path / "workspace"),
        "AGENT_WORKSPACES_ROOT": str(tmp_path / "workspaces"),
        "AGENT_BASH_SANDBOX": "on",
        "DJANGO_DEBUG": "1",
        name: value,
    }
    (tmp_path / "workspace").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and f"{name}={value!r}" in done.stderr, done.stderr[-2000:]


def test_bash_is_not_offered_around_a_layout_it_cannot_hide(tmp_path):
    with override_settings(AGENT_WORKSPACES_ROOT=Path("/usr"), AGENT_MUTATING_TOOLS="ask"):
        choice = bash_choice()
    assert not choice.offered and "AGENT_WORKSPACES_ROOT" in choice.note, choice.note
