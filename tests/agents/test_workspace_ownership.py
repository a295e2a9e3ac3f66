"""Start-up never hands the server's own code to the sandbox user (issue #49, item 5): with
AGENT_WORKSPACE set to the checkout, the probe's server chowned 478 of the checkout's files to
uid 65534. A workspace (or workspaces root) that holds the checkout or the virtual environment, or
lies inside one, stops start-up naming it; and a workspace made that way anyhow is never chowned."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from agents.workspaces import WorkspaceError, place_of, prepare
from tests.procs import ROOT


def _start(tmp_path: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    (tmp_path / "workspace").mkdir(exist_ok=True)
    env |= {
        "THREADLINE_DATA_DIR": str(tmp_path / "data"),
        "AGENT_WORKSPACE": str(tmp_path / "workspace"),
        "AGENT_WORKSPACES_ROOT": str(tmp_path / "workspaces"),
        **environ,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("AGENT_WORKSPACE", "."),
        ("AGENT_WORKSPACE", "agents"),
        ("AGENT_WORKSPACE", ".venv"),
        ("AGENT_WORKSPACE", ".."),
        ("AGENT_WORKSPACES_ROOT", "workspaces"),
        ("AGENT_WORKSPACES_ROOT", ".."),
    ],
)
def test_a_workspace_that_holds_or_lies_in_the_servers_code_stops_start_up(tmp_path, name, where):
    path = (ROOT / where).resolve()
    done = _start(tmp_path, **{name: str(path)})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr, done.stderr[-2000:]
    assert f"{name}={str(path)!r}" in done.stderr and "the server's" in done.stderr, done.stderr[-2000:]


def test_a_workspace_of_its_own_starts(tmp_path):
    done = _start(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def _owners(tree: Path) -> set[int]:
    return {os.lstat(path).st_uid for path in [tree, *tree.rglob("*")]}


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="a workspace is handed over only by a root server"
)
@pytest.mark.parametrize("where", ["checkout", "parent", "inside"])
def test_the_servers_code_is_never_handed_to_the_sandbox_user(tmp_path, where):
    checkout = tmp_path / "checkout"
    for relative in ("manage.py", "agents/models.py", ".venv/bin/python", "inside/notes.txt"):
        (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
        (checkout / relative).write_text("# the server's\n")
    workspace = {"checkout": checkout, "parent": tmp_path, "inside": checkout / "inside"}[where]
    with override_settings(BASE_DIR=checkout, AGENT_WORKSPACE=workspace, AGENT_BASH_SANDBOX="on"):
        place = place_of(owner_id=None, thread_pk=None)
        with pytest.raises(WorkspaceError, match="the server's code"):
            prepare(place)
    assert _owners(tmp_path) == {0}
