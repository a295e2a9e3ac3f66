"""bash runs in a bubblewrap sandbox: it cannot see the server's processes, secrets, data dir or
checkout, writes only the workspace, has no network unless allowed, and dies with the server
(issue #11, item 2). Without bwrap, bash is not offered unless AGENT_BASH_SANDBOX=off says so."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from agents.confinement import bash_choice
from agents.runtime import tool_context, tools_for
from agents.workspaces import hand_over
from orchestrator.tools.base import ToolOutput, ToolRegistry
from orchestrator.tools.mutating import BASH
from tests.procs import ROOT

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (Debian's bubblewrap, which .ci/run installs) is missing or cannot run here",
)

PROBE_SECRET = "sk-ant-probe-secret-0123456789"

# A server in miniature: a process started with secrets in its environment that runs one bash call.
HARNESS = """
import asyncio, sys, django
django.setup()
from agents.runtime import tool_context
from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.mutating import BASH
out = asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": sys.argv[1]}, tool_context()))
print(out.content, flush=True)
"""


@pytest.fixture
def ws(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("inside the workspace\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "agui-token").write_text("token-in-the-data-dir\n")
    with override_settings(AGENT_WORKSPACE=root, DATA_DIR=data, AGENT_BASH_SANDBOX="on", AGENT_BASH_NETWORK="off"):
        hand_over(root)  # as a run's workspace is: the sandbox's user may write it
        yield root


def bash(command: str) -> ToolOutput:
    return asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": command}, tool_context()))


def harness(ws: Path, command: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "AGENT_WORKSPACE": str(ws),
        "ANTHROPIC_API_KEY": PROBE_SECRET,
        "AGENT_BASH_SANDBOX": "on",
    }
    return subprocess.Popen(
        [sys.executable, "-c", HARNESS, command], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )


def test_bash_cannot_read_the_servers_environment(ws):
    command = "for f in /proc/$PPID/environ /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; echo $PPID"
    process = harness(ws, command)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    assert "PATH=" in out  # it read environments: only the sandbox's own, scrubbed ones
    assert PROBE_SECRET not in out


def test_the_data_dir_and_the_checkout_are_hidden(ws):
    out = bash(f"cat {settings.DATA_DIR}/agui-token; find {settings.BASE_DIR} -mindepth 1 | wc -l; cat notes.txt")
    assert "token-in-the-data-dir" not in out.content
    assert out.content.splitlines()[-3] == "0"
    assert out.content.splitlines()[-2] == "inside the workspace"


def test_when_the_checkout_is_the_workspace_only_its_data_dir_and_venv_are_hidden(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "data").mkdir(parents=True)
    (checkout / "data" / "agui-token").write_text("token-in-the-data-dir\n")
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (checkout / "manage.py").write_text("# the server\n")
    with override_settings(AGENT_WORKSPACE=checkout, BASE_DIR=checkout, DATA_DIR=checkout / "data"):
        out = bash("ls -A data .venv; cat manage.py; echo trojan > .venv/bin/python; echo rc=$?")
    assert "token-in-the-data-dir" not in out.content
    assert "# the server" in out.content
    assert (checkout / ".venv" / "bin" / "python").read_text() == "#!/bin/sh\n"
    assert (checkout / "data" / "agui-token").read_text() == "token-in-the-data-dir\n"


def test_only_the_workspace_is_writable(ws):
    out = bash("echo made > made.txt; touch /usr/local/probe-$$ 2>&1; echo rc=$?")
    assert (ws / "made.txt").read_text() == "made\n"
    assert "Read-only file system" in out.content and "rc=1" in out.content


def test_no_mode_shares_the_hosts_network(ws):
    """With network on, the way out is Threadline's proxy (tests/agents/test_bash_network.py), never
    the host's interfaces: its loopback stays out of reach (issue #47)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    probe = f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo connected || echo refused"
    try:
        assert "refused" in bash(probe).content
        for mode in ("allowlist", "on"):
            with override_settings(AGENT_BASH_NETWORK=mode):
                assert "refused" in bash(probe).content
    finally:
        listener.close()


def _marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(marker.encode()):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_bash_and_its_children_die_with_the_server_even_on_sigkill(ws):
    marker = f"threadline-probe-{uuid.uuid4().hex}"
    server = harness(ws, f"(exec -a {marker} sleep 600) & exec -a {marker} sleep 600")
    try:
        deadline = time.monotonic() + 60
        while len(_marked(marker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_marked(marker)) == 2
    finally:
        os.kill(server.pid, signal.SIGKILL)
        server.communicate()
    deadline = time.monotonic() + 10
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    leftovers = _marked(marker)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert leftovers == []


def test_without_bwrap_bash_is_offered_only_when_the_sandbox_is_turned_off(ws, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with override_settings(AGENT_MUTATING_TOOLS="ask"):
        choice = bash_choice()
        assert not choice.offered and "AGENT_BASH_SANDBOX=off" in choice.note
        assert tools_for().get("bash") is None
        with override_settings(AGENT_BASH_SANDBOX="off"):
            assert bash_choice().offered and "WITHOUT a sandbox" in bash_choice().note
            assert tools_for().get("bash") is not None


def test_a_sandboxed_command_that_times_out_is_killed_with_its_children(ws):
    marker = f"threadline-probe-{uuid.uuid4().hex}"
    registry = ToolRegistry.of([BASH])
    command = f"(exec -a {marker} sleep 600) & exec -a {marker} sleep 600"
    out = asyncio.run(registry.call("bash", {"command": command, "timeout_seconds": 2}, tool_context()))
    assert out.is_error and "timed out" in out.content
    deadline = time.monotonic() + 10
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked(marker) == []


# Issue #23, item 1: whatever the server runs as (root, here and on CI), the agent's bash holds no
# capability and has no way back to the host. Each escape the probe found, tried from the bash tool.


def test_bash_holds_no_capability_and_is_not_root(ws):
    out = bash("grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; echo uid=$(id -u)").content
    capabilities = [line.split()[1] for line in out.splitlines() if line.startswith("Cap")]
    assert len(capabilities) == 5 and all(int(value, 16) == 0 for value in capabilities), out
    assert "uid=0" not in out


def test_bash_cannot_unmount_what_hides_the_host(ws):
    token = Path(settings.DATA_DIR) / "agui-token"
    out = bash(f"umount -l /tmp; umount -l /proc; umount -l {ws}; echo umounts; cat {token} /proc/*/environ").content
    assert out.count("must be superuser") == 3, out
    assert "token-in-the-data-dir" not in out and PROBE_SECRET not in out


def test_bash_cannot_remount_the_system_writable_nor_write_it(ws):
    out = bash("mount -o remount,rw /usr; echo mount=$?; touch /usr/threadline-probe; echo touch=$?").content
    assert "mount=32" in out and "touch=1" in out
    assert not Path("/usr/threadline-probe").exists()


def test_bash_cannot_enter_another_namespace_nor_read_process_memory(ws):
    out = bash("nsenter -t 1 -n -m true; echo nsenter=$?; head -c1 /proc/1/mem >/dev/null; echo mem=$?").content
    assert "nsenter=1" in out and "mem=1" in out, out


def test_a_nested_user_namespace_does_not_unmount_the_sandbox_either(ws):
    out = bash("unshare -Urm sh -c 'umount -l /tmp && ls /tmp' 2>&1; echo rc=$?").content
    assert "rc=0" not in out or "threadline" not in out
    assert "agui-token" not in out


def test_bash_cannot_write_the_servers_code_wherever_it_is(ws):
    target = Path(settings.BASE_DIR) / "project" / "threadline_probe.py"
    out = bash(f"echo 'import os' > {target}; echo rc=$?").content
    assert "rc=1" in out and not target.exists()


@override_settings(AGENT_BASH_MAX_PROCESSES=40)
def test_bash_has_a_bound_on_processes(ws):
    # 1,500 forks in one call, as the probe tried; each child sleeps, so they all count at once.
    script = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(1500):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    started += 1\n"
        "print('started', started, flush=True)\n"
    )
    out = bash(f"python3 -c {shlex.quote(script)}").content
    started = int(out.split("started ")[1].split()[0])
    assert 0 < started < 40, out


@override_settings(AGENT_BASH_MAX_MEMORY_BYTES=256 << 20)
def test_bash_has_a_bound_on_memory(ws):
    out = bash("python3 -c 'bytearray(400_000_000)'; echo rc=$?").content
    assert "MemoryError" in out and "rc=1" in out, out


@pytest.mark.skipif(os.geteuid() != 0, reason="setpriv is used only when the server is root")
def test_bash_is_not_offered_when_its_sandbox_would_keep_capabilities(ws, tmp_path, monkeypatch):
    # A setpriv that runs the command without dropping anything: the check runs a command in the
    # sandbox and reads what it holds, so it refuses bash rather than trusting that bwrap started.
    # It lives under /opt, which the sandbox shows, so that it runs there as a real setpriv would.
    shim = Path(tempfile.mkdtemp(prefix="threadline-test-", dir="/opt"))
    try:
        (shim / "setpriv").write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
        (shim / "setpriv").chmod(0o755)
        monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
        with override_settings(AGENT_MUTATING_TOOLS="ask"):
            choice = bash_choice()
            assert not choice.offered and "capabilities" in choice.note, choice.note
            assert tools_for().get("bash") is None
    finally:
        shutil.rmtree(shim)
