"""The environment block: what the model should know about where it works, appended to the system
prompt at the start of every run (every user turn): the date and time, the OS, the workspace and,
when the workspace is a git repository, its branch and a short status.

It is built once per run, not per model call, so the system prompt stays the same for every call of
a run and its prompt cache holds; a new turn re-writes that cache once (the system prompt is small).
An agent can switch it off (``Agent.environment_block``).
"""

from __future__ import annotations

import asyncio
import platform
import shlex
import subprocess
from datetime import datetime
from pathlib import Path

from orchestrator.tools.sandbox import Sandbox
from orchestrator.tools.shell import command_environment

# How many lines of `git status` the model sees; the rest is counted.
STATUS_LINES = 10
GIT_TIMEOUT_SECONDS = 2.0


async def environment_block(workspace: Path, *, sandbox: Sandbox | None = None, now: datetime | None = None) -> str:
    """The block, starting with a blank line so it can be appended to any prompt."""
    moment = (now or datetime.now()).astimezone()
    lines = [
        f"Date and time: {moment:%A %Y-%m-%d %H:%M} ({moment:%Z}, UTC{moment:%z})",
        f"OS: {platform.system()} {platform.release()} ({platform.machine()})",
        f"Workspace: {workspace}",
    ]
    lines.extend(await _shared_git_lines(workspace, sandbox))
    return "\n\n<environment>\n" + "\n".join(lines) + "\n</environment>"


# The git call in flight per workspace: runs that start while one is under way take its answer
# rather than spawning git again (a hundred runs starting at once spawned two hundred processes,
# most of the per-run cost in bench/stream.py --concurrent). Nothing is kept once it has answered,
# so no run sees a status older than the call it joined.
_in_flight: dict[tuple[Path, Sandbox | None], asyncio.Task[list[str]]] = {}


async def _shared_git_lines(workspace: Path, sandbox: Sandbox | None) -> list[str]:
    key = (workspace, sandbox)
    task = _in_flight.get(key)
    if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
        # In a worker thread, not spawned from the event loop: the loop's own spawn forks the whole
        # server and waits for the child's exec, which stopped every stream on the process for about
        # 12 ms per call once the server held 200 MiB (bench/stream.py --concurrent). ``subprocess``
        # uses vfork, which copies nothing, and a thread that waits for it stops nobody.
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(_git_lines, workspace, sandbox))
        _in_flight[key] = task
        task.add_done_callback(lambda done: _in_flight.pop(key, None) if _in_flight.get(key) is done else None)
    # Shielded: a run cancelled while it waits must not cancel the call the others wait for.
    return list(await asyncio.shield(task))


def _git_lines(workspace: Path, sandbox: Sandbox | None) -> list[str]:
    if sandbox is not None and not (workspace / ".git").exists():
        # In the sandbox the directories above the workspace are empty ones (orchestrator/tools/sandbox.py),
        # so git finds a repository only in the workspace itself: without its .git there is none,
        # and starting the sandbox to be told so was most of the 20 ms before a run's first token.
        return []
    # One git process for both the branch and the status (--branch puts the branch on the first
    # line): a process is a few milliseconds, and a run's first token waits for this block.
    status = _git(workspace, sandbox, "status", "--porcelain=v1", "--branch", "--untracked-files=normal")
    if status is None:
        return []  # not a repository, or no git
    head, *rest = status.splitlines() or [""]
    lines = [f"Git branch: {_branch(head) or '(none)'}"]
    changes = [line for line in rest if line.strip()]
    if not changes:
        lines.append("Git status: clean")
        return lines
    lines.append(f"Git status: {len(changes)} changed or untracked path{'s' if len(changes) != 1 else ''}")
    lines.extend(f"  {line}" for line in changes[:STATUS_LINES])
    if len(changes) > STATUS_LINES:
        lines.append(f"  … and {len(changes) - STATUS_LINES} more")
    return lines


def _branch(head: str) -> str:
    """The branch of ``git status --branch``'s first line: ``## main...origin/main [ahead 1]``,
    ``## No commits yet on main``, or ``## HEAD (no branch)`` when detached (HEAD, as
    ``git rev-parse --abbrev-ref HEAD`` says). A ref name never holds "..", so "..." ends the branch."""
    name = head.removeprefix("## ")
    for before in ("No commits yet on ", "Initial commit on "):
        if name.startswith(before):
            return name.removeprefix(before)
    if name.startswith("HEAD (no branch)"):
        return "HEAD"
    return name.split("...", 1)[0]


def _git(workspace: Path, sandbox: Sandbox | None, *arguments: str) -> str | None:
    """git's output, or None when it fails, is missing or takes too long.

    The repository is the model's to write, and its config can make git run commands (a
    ``core.fsmonitor`` hook, a clean filter): git runs in the bash tool's sandbox when there is one,
    always with the environment bash gets less what the operator added (no credentials), and with
    the fsmonitor hook off."""
    # No index lock taken by a status that only looks (GIT_OPTIONAL_LOCKS), no pager, no prompt.
    env = command_environment() | {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}
    if sandbox is not None:
        env = sandbox.environment(env)
    argv = ["git", "-c", "core.fsmonitor=false", "-C", str(workspace), *arguments]
    try:
        done = subprocess.run(
            argv if sandbox is None else sandbox.argv(shlex.join(argv)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            timeout=GIT_TIMEOUT_SECONDS,  # the child is killed and waited for when it runs over
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8", errors="replace")
