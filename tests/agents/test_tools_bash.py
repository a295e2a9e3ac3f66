"""bash runs in the workspace, without secrets, within its time, and leaves no process behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from orchestrator.tools.base import ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.mutating import BASH
from orchestrator.tools.shaping import DEFAULT_MAX_BYTES


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def bash(ws: Path, command: str, **arguments: object) -> ToolOutput:
    registry = ToolRegistry.of([BASH])
    return await registry.call("bash", {"command": command, **arguments}, ToolContext(Workspace(ws)))


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def gone(*pids: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        await asyncio.sleep(0.05)
    return False


def read_pid(path: Path) -> int | None:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


async def pid_from(path: Path, within: float = 5.0) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        pid = read_pid(path)
        if pid is not None:
            return pid
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


async def test_bash_runs_in_the_workspace_and_reports_the_exit_code(ws):
    out = await bash(ws, "pwd; echo to-stderr >&2; exit 3")
    assert not out.is_error  # a command that ran and failed is a result for the model, not a tool error
    lines = out.content.splitlines()
    assert lines[0] == str(ws.resolve())
    assert "to-stderr" in lines
    assert lines[-1] == "[exit code 3]"
    assert (await bash(ws, "true")).content == "(no output)\n[exit code 0]"


async def test_bash_interleaves_stdout_and_stderr_in_order(ws):
    out = await bash(ws, "echo one; echo two >&2; echo three")
    assert out.content.splitlines()[:3] == ["one", "two", "three"]


async def test_bash_keeps_secrets_out_of_the_environment(ws, monkeypatch):
    secrets = {
        "ANTHROPIC_API_KEY": "sk-ant-leak",
        "ANTHROPIC_BASE_URL": "http://leak",
        "AGUI_TOKEN": "agui-leak",
        "DJANGO_SECRET_KEY": "django-leak",
        "DATABASE_URL": "postgres://user:pw@leak/db",
        "REDIS_URL": "redis://leak",
        "GITHUB_TOKEN": "ghp-leak",
        "MY_SERVICE_PASSWORD": "pw-leak",
        "aws_secret_access_key": "aws-leak",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LANG", "C.UTF-8")
    out = await bash(ws, "env")
    for name, value in secrets.items():
        assert name not in out.content
        assert value not in out.content
    names = {line.split("=", 1)[0] for line in out.content.splitlines()}
    assert "PATH" in names
    assert "LANG=C.UTF-8" in out.content


async def test_a_timeout_kills_the_command_and_its_children(ws):
    command = "echo $$ > bash.pid; sleep 300 & echo $! > child.pid; wait"
    started = time.monotonic()
    out = await bash(ws, command, timeout_seconds=1)
    assert time.monotonic() - started < 10
    assert out.is_error and "timed out after 1 s" in out.content
    pids = int((ws / "bash.pid").read_text()), int((ws / "child.pid").read_text())
    assert await gone(*pids)


async def test_background_children_do_not_outlive_the_command(ws):
    started = time.monotonic()
    out = await bash(ws, "sleep 300 & echo $! > child.pid; echo started")
    assert time.monotonic() - started < 10  # not held up by the child keeping the output open
    assert "started" in out.content and "[exit code 0]" in out.content
    assert await gone(int((ws / "child.pid").read_text()))


async def test_cancelling_the_call_kills_the_command_and_its_children(ws):
    command = "echo $$ > bash.pid; sleep 300 & echo $! > child.pid; wait"
    task = asyncio.create_task(bash(ws, command, timeout_seconds=600))
    pids = await pid_from(ws / "bash.pid"), await pid_from(ws / "child.pid")
    assert all(alive(pid) for pid in pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(*pids)


async def test_long_output_keeps_its_head_and_tail(ws):
    out = await bash(ws, "echo BEGIN; head -c 200000 /dev/zero | tr '\\0' 'x'; echo; echo END")
    assert not out.is_error
    assert out.content.startswith("BEGIN\n")
    assert out.content.endswith("END\n[exit code 0]")
    assert "omitted; the full output had 3 lines, 200,011 bytes" in out.content
    assert len(out.content) < DEFAULT_MAX_BYTES + 200


async def test_many_short_lines_are_shaped_like_any_tool_output(ws):
    out = await bash(ws, "seq 1 5000")
    assert out.truncated and out.line_count == 5000
    lines = out.content.splitlines()
    assert lines[0] == "1" and lines[199] == "200" and lines[-2] == "5000" and lines[-1] == "[exit code 0]"
    assert len(lines) == 200 + 1 + 200 + 1  # head, marker, tail, exit code


@pytest.mark.parametrize("seconds", [0, -1, 601, "10", True])
async def test_bash_refuses_a_bad_timeout(ws, seconds):
    out = await bash(ws, "echo never > ran.txt", timeout_seconds=seconds)
    assert out.is_error and "timeout_seconds" in out.content
    assert not (ws / "ran.txt").exists()


async def test_bash_needs_a_command(ws):
    out = await bash(ws, "")
    assert out.is_error and "command" in out.content
