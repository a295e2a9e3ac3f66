"""Start-up never hands the server's own code to the sandbox user (issue #49, item 5): with
AGENT_WORKSPACE set to the checkout, the probe's server chowned 478 of the checkout's files to
uid 65534. A workspace (or workspaces root) that holds the checkout or the virtual environment, or
lies inside one, stops start-up naming it; and a workspace made that way anyhow is never chowned."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.test import override_settings

from agents.workspaces import WorkspaceError, hand_over, place_of, prepare, sandbox_uid
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


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="a workspace is handed over only by a root server"
)
def test_a_directory_swapped_for_a_link_while_the_workspace_is_handed_over_is_not_followed(tmp_path):
    # In the shared workspace a run's commands may start while another run's hand-over still walks it
    # (its root is the sandbox user's already). A hostile command swaps each directory the walk listed
    # but has not entered yet for a link to root's files: they must keep their owner.
    outside = tmp_path / "root-owned"
    outside.mkdir()
    for i in range(50):
        (outside / f"secret-{i}").write_text("root's\n")
    workspace = tmp_path / "workspace"
    directories = [workspace / f"d{i:02d}" for i in range(20)]
    for directory in directories:
        directory.mkdir(parents=True)
        for i in range(200):
            (directory / f"f{i:03d}").write_text("x")
    with override_settings(AGENT_WORKSPACE=workspace, AGENT_BASH_SANDBOX="on"):
        uid = sandbox_uid()
        assert uid is not None and uid != 0
        done = threading.Event()
        swapped: list[Path] = []

        def hostile() -> None:
            while not done.is_set():
                entered = [d for d in directories if os.lstat(d / "f000").st_uid == uid]
                if entered:  # the walk is inside one: it listed them all
                    for directory in directories:
                        if directory not in entered and os.lstat(directory).st_uid == 0:
                            directory.rename(directory.with_name(directory.name + ".moved"))
                            directory.symlink_to(outside)
                            swapped.append(directory)
                    return

        swapper = threading.Thread(target=hostile)
        swapper.start()
        try:
            hand_over(workspace)
        finally:
            done.set()
            swapper.join()
    assert swapped, "the walk ended before the swap: make the tree larger"
    assert _owners(outside) == {0}
    assert os.lstat(workspace).st_uid == uid


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="a workspace is handed over only by a root server"
)
def test_a_workspace_configured_through_a_link_is_handed_over_whole(tmp_path):
    real = tmp_path / "real"
    (real / "src").mkdir(parents=True)
    (real / "src" / "main.py").write_text("print()\n")
    (tmp_path / "linked").symlink_to(real)
    with override_settings(AGENT_WORKSPACE=tmp_path / "linked", AGENT_BASH_SANDBOX="on"):
        uid = sandbox_uid()
        hand_over(tmp_path / "linked")
    assert _owners(real) == {uid}
