"""The environment block: date and time, OS, workspace, git branch and status, in the system prompt
the model receives at the start of each run, unless the agent switches it off."""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from agents.confinement import bash_choice, sandbox_for
from agents.workspaces import hand_over
from orchestrator import environment
from orchestrator.environment import STATUS_LINES, environment_block
from tests.fakes.anthropic_api import text_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run

NOW = datetime(2026, 12, 1, 4, 30, tzinfo=UTC)


def _git(root: Path, *arguments: str) -> None:
    subprocess.run(
        # safe.directory: the workspace belongs to the sandbox user, and git run as root checks that.
        [
            "git",
            "-C",
            str(root),
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            *arguments,
        ],
        check=True,
        capture_output=True,
    )


def _repo(root: Path) -> Path:
    root.mkdir(exist_ok=True)
    _git(root, "init", "-q", "-b", "feature/env")
    (root / "tracked.txt").write_text("one\n")
    _git(root, "add", "tracked.txt")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_the_block_names_the_time_the_os_and_the_workspace(tmp_path):
    block = asyncio.run(environment_block(tmp_path, now=NOW))
    assert block.startswith("\n\n<environment>\n") and block.endswith("\n</environment>")
    local = NOW.astimezone()
    assert f"Date and time: {local:%A %Y-%m-%d %H:%M}" in block
    assert f"OS: {platform.system()} {platform.release()}" in block
    assert f"Workspace: {tmp_path}" in block
    assert "Git" not in block  # not a repository


def test_in_a_repository_it_adds_the_branch_and_a_short_status(tmp_path):
    root = _repo(tmp_path / "repo")
    assert "Git branch: feature/env\nGit status: clean" in asyncio.run(environment_block(root, now=NOW))
    (root / "tracked.txt").write_text("two\n")
    for index in range(STATUS_LINES + 2):
        (root / f"new{index:02}.txt").write_text("x\n")
    block = asyncio.run(environment_block(root, now=NOW))
    assert f"Git status: {STATUS_LINES + 3} changed or untracked paths\n   M tracked.txt\n  ?? new00.txt" in block
    assert "  … and 3 more" in block


def test_the_branch_of_a_new_repository_a_detached_head_and_a_branch_with_an_upstream(tmp_path):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _git(fresh, "init", "-q", "-b", "start")
    (fresh / "a.txt").write_text("a\n")
    assert "Git branch: start\nGit status: 1 changed or untracked path\n  ?? a.txt" in asyncio.run(
        environment_block(fresh, now=NOW)
    )
    root = _repo(tmp_path / "repo")
    _git(root, "checkout", "-q", "--detach")
    assert "Git branch: HEAD\nGit status: clean" in asyncio.run(environment_block(root, now=NOW))
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "-b", "feature/env", str(root), str(clone))
    _git(clone, "commit", "-q", "--allow-empty", "-m", "ahead")
    assert "Git branch: feature/env\nGit status: clean" in asyncio.run(environment_block(clone, now=NOW))


def test_runs_that_start_together_share_one_git_call_and_a_later_run_asks_again(tmp_path, monkeypatch):
    # git behind a shim on PATH that counts its calls: the edge, like the fake API's socket.
    root = _repo(tmp_path / "repo")
    shims, calls = tmp_path / "bin", tmp_path / "calls"
    shims.mkdir()
    real = shutil.which("git")
    (shims / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {real} "$@"\n')
    (shims / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")

    async def together() -> list[str]:
        return await asyncio.gather(*(environment_block(root, now=NOW) for _ in range(20)))

    blocks = asyncio.run(together())
    assert len(set(blocks)) == 1 and "Git status: clean" in blocks[0]
    assert len(calls.read_text().splitlines()) == 1  # one status (with the branch), for all twenty
    (root / "tracked.txt").write_text("two\n")
    assert "Git status: 1 changed or untracked path\n   M tracked.txt" in asyncio.run(environment_block(root, now=NOW))
    assert len(calls.read_text().splitlines()) == 2


def test_the_model_receives_the_block_in_its_system_prompt(server, fake_api, workspace):
    _repo(workspace)
    fake_api.script([text_turn(["ok"])])
    post_run(server.url, "coder", v1(run_input("t-env", "r1", user("where am I?"))))
    server.drain()
    system = fake_api.requests[0].body["system"][0]["text"]
    assert "\n\n<environment>\nDate and time: " in system and system.endswith("\n</environment>")
    assert f"Workspace: {workspace}\n" in system
    assert "Git branch: feature/env\n" in system and "?? README.md" in system


def test_an_agent_can_switch_the_block_off(server, fake_api, coder):
    coder.environment_block = False
    coder.grounding_mode = "off"  # no grounding protocol either: the prompt is the agent's alone
    coder.save()
    fake_api.script([text_turn(["ok"])])
    post_run(server.url, "coder", v1(run_input("t-env-off", "r1", user("hi"))))
    server.drain()
    system = fake_api.requests[0].body["system"][0]["text"]
    assert system == coder.system_prompt and "<environment>" not in system


def test_a_git_that_hangs_is_killed_and_the_block_goes_without_it(tmp_path, monkeypatch):
    # A git that never answers (a repository on a dead network mount, say): the run must not wait for it.
    root = _repo(tmp_path / "repo")
    shims, pids = tmp_path / "bin", tmp_path / "pids"
    shims.mkdir()
    (shims / "git").write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 30\n")
    (shims / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    monkeypatch.setattr(environment, "GIT_TIMEOUT_SECONDS", 0.5)

    block = asyncio.run(environment_block(root, now=NOW))

    assert f"Workspace: {root}" in block and "Git" not in block
    (pid,) = pids.read_text().split()  # the one git call
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped, not left to run


def _hostile_repo(root: Path, outside: Path) -> Path:
    """A repository whose config, as a model could write it, runs a command at every ``git status``."""
    _repo(root)
    hook = f"sh -c 'env > {outside}/from-git.txt; env > leaked.txt; exit 1'"
    _git(root, "config", "core.fsmonitor", hook)
    (root / "tracked.txt").write_text("changed\n")  # status must look at the work tree
    return root


def test_a_repository_config_cannot_run_commands_with_the_servers_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-environment-secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    root = _hostile_repo(tmp_path / "repo", outside)
    block = asyncio.run(environment_block(root, now=NOW))
    assert "Git status: 1 changed or untracked path" in block
    assert not (outside / "from-git.txt").exists() and not (root / "leaked.txt").exists()  # the hook is off


def test_with_the_bash_sandbox_git_is_confined_like_bash(tmp_path, monkeypatch):
    assert bash_choice().sandbox is not None, "bubblewrap is missing or cannot run here (.ci/run installs it)"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-environment-secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    root = _hostile_repo(tmp_path / "repo", outside)
    # git behind a shim that writes where it can, standing for whatever else a repository's config
    # could make git run (a clean filter, say). In the workspace, which the sandbox shows.
    shims = root / ".shims"
    shims.mkdir()
    real = shutil.which("git")
    (shims / "git").write_text(f'#!/bin/sh\nenv > {outside}/from-git.txt\nenv > {root}/shim.txt\nexec {real} "$@"\n')
    (shims / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")

    hand_over(root)  # as a run's workspace is, so the sandbox's user may write there
    block = asyncio.run(environment_block(root, sandbox=sandbox_for(root), now=NOW))

    assert "Git branch: feature/env" in block
    assert not list(outside.iterdir())  # outside the workspace, the sandbox writes to its own /tmp at most
    seen = (root / "shim.txt").read_text()
    assert "PATH=" in seen and "sk-ant-environment-secret" not in seen


def test_with_the_bash_sandbox_a_workspace_that_is_no_repository_starts_no_git(tmp_path, monkeypatch):
    # Inside the sandbox git could only find a repository in the workspace itself; without one the
    # block goes without git, and no sandbox is started to be told so.
    assert bash_choice().sandbox is not None, "bubblewrap is missing or cannot run here (.ci/run installs it)"
    root = tmp_path / "plain"
    root.mkdir()
    shims, calls = tmp_path / "bin", tmp_path / "calls"
    shims.mkdir()
    (shims / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexit 1\n')
    (shims / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    hand_over(root)
    block = asyncio.run(environment_block(root, sandbox=sandbox_for(root), now=NOW))
    assert f"Workspace: {root}" in block and "Git" not in block
    assert not calls.exists()  # a repository in the workspace is asked: the test above
