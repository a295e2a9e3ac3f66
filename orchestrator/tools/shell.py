"""bash: run a shell command in the workspace, with a timeout, a shaped output and no secrets.

The command runs in the workspace's bubblewrap sandbox (orchestrator/tools/sandbox.py) when it has one,
started with only the allowed part of the server's environment; without one (``AGENT_BASH_SANDBOX=off``) bash itself is
killed by the kernel when the server dies (PR_SET_PDEATHSIG). Either way it runs in a session (and
process group) of its own; on timeout or cancellation the whole group is killed, so no child
outlives the call. Background processes still holding the output pipe when the command exits are
killed as well.

The output is shaped as every tool's is (50,000 bytes or 600 lines, then 200 head and 200 tail
lines), while it is read: only what the shaping can show is kept in memory (issue #13).

A sandbox with network (``Sandbox.egress``) gets a proxy of its own for the call (issue #47), started
before the command and closed after it; what the command did on the network closes the output."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.tools import usage
from orchestrator.tools.base import CURRENT_CALL_ID, Tool, ToolContext, ToolError, ToolOutput, require_str
from orchestrator.tools.cgroups import CallGroup, open_call_group
from orchestrator.tools.egressproxy import EgressProxy, NetworkUsage
from orchestrator.tools.sandbox import IGNORE_FILE_SIZE_SIGNAL, Sandbox, file_size_blocks
from orchestrator.tools.shaping import OutputLimits, ShapedOutput, StreamShaper
from orchestrator.tools.targets import CommandTargets

DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 600
DRAIN_SECONDS = 1.0  # after the command exits, how long leftovers may keep the output open
_READ_CHUNK = 65_536

# What of the server's environment a command sees: an allowlist, so that a credential never reaches
# it whatever its name (a deny-list by name let GITHUB_PAT and DOCS_BEARER through: issue #49,
# item 9). The operator adds names with AGENT_BASH_ENV_ALLOW (``ToolContext.bash_env_allow``).
ALLOWED_NAMES = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ"})
ALLOWED_PREFIXES = ("LC_",)
# Commands are not interactive: no pager waits for a key, git never prompts for a password.
_FIXED_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


def is_allowed(name: str, also: tuple[str, ...] = ()) -> bool:
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES) or name in also


def command_environment(also: tuple[str, ...] = (), environ: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment as a command sees it: only the allowed variables, and ``also``."""
    source = dict(os.environ) if environ is None else environ
    env = {name: value for name, value in source.items() if is_allowed(name, also)}
    env.update(_FIXED_ENV)
    return env


class _Output:
    """The command's output: a pipe of our own (Process.wait() would otherwise also wait for the
    pipe to close, which a background child can hold open; this one we close when we are done),
    read on the event loop into ``shaper``. ``ended`` is done once the output ends.

    Its read end is watched with ``add_reader`` and closed here, once. A pipe transport
    (``connect_read_pipe``) will not do on uvloop, the loop ``manage.py serve`` runs: libuv closes
    the descriptor, then the file object around it closes the same number again
    (MagicStack/uvloop#763). A worker thread handed that number in between lost its file to the
    second close: with 200 runs' bash calls starting at once, the size walk of their shared
    workspace read another call's pipe ("NotADirectoryError: ... ws") and, closing it, made libuv
    refuse the pipe of the call after ("FileExistsError: File exists")."""

    def __init__(self, shaper: StreamShaper) -> None:
        self._loop = asyncio.get_running_loop()
        self._shaper = shaper
        self.ended: asyncio.Future[None] = self._loop.create_future()
        self._read_fd, self.write_fd = os.pipe()
        try:
            os.set_blocking(self._read_fd, False)
            self._loop.add_reader(self._read_fd, self._readable)
        except BaseException:
            os.close(self._read_fd)
            os.close(self.write_fd)
            raise

    def _readable(self) -> None:
        try:
            chunk = os.read(self._read_fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:  # for whoever awaits ``ended``: a reader left in place would fail again at once
            self.close()
            self.ended.set_exception(exc)
            return
        if chunk:
            self._shaper.feed(chunk)
            return
        self.close()
        self.ended.set_result(None)

    def close(self) -> None:
        """Stops reading and closes the read end; the write end is the caller's to close."""
        if self._read_fd < 0:
            return
        self._loop.remove_reader(self._read_fd)
        os.close(self._read_fd)
        self._read_fd = -1


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


@dataclass(slots=True, frozen=True)
class SizeWatch:
    """The workspace's size limit while a command runs (issue #49, item 6): no file it writes may
    grow past ``file_bytes`` (``RLIMIT_FSIZE``: the kernel refuses the byte past it), and the command
    is stopped once the workspace at ``root`` holds more than ``ceiling`` bytes."""

    root: Path
    ceiling: int
    file_bytes: int


@dataclass(slots=True, frozen=True)
class ShellResult:
    output: ShapedOutput
    exit_code: int | None
    timed_out: bool
    over_limit: int | None = None  # what the workspace held when the command was stopped for its size
    memory_kills: int = 0  # processes the kernel killed at the call's memory bound (its cgroup's)
    network: NetworkUsage | None = None  # with a sandbox that has network: what the command did there


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: the kernel sends SIGKILL when the server's thread that started it
    dies (the event loop's), so a bash without sandbox does not outlive a killed server."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


async def run_shell(
    command: str,
    *,
    cwd: str,
    time_limit: float,
    env: dict[str, str],
    limits: OutputLimits,
    sandbox: Sandbox | None = None,
    watch: SizeWatch | None = None,
) -> ShellResult:
    """Runs ``command`` with /bin/bash -c, in ``sandbox`` when given; stdout and stderr are
    interleaved into one output, shaped to ``limits``. With ``watch``, the command is stopped
    (killed with its children) once the workspace passes the watch's ceiling. A sandbox with
    network gets a proxy of its own for the call."""
    if sandbox is not None and sandbox.egress is not None:
        async with EgressProxy(sandbox.egress) as proxy:
            result = await _bounded(command, cwd, time_limit, env, limits, sandbox, watch, proxy.socket_path)
        return dataclasses.replace(result, network=proxy.usage)
    return await _bounded(command, cwd, time_limit, env, limits, sandbox, watch, None)


async def _bounded(
    command: str,
    cwd: str,
    time_limit: float,
    env: dict[str, str],
    limits: OutputLimits,
    sandbox: Sandbox | None,
    watch: SizeWatch | None,
    egress_socket: str | None,
) -> ShellResult:
    """``run_shell`` under the call's bounds: its largest file, its cgroup, its proxy's socket."""
    file_bytes = None if watch is None else watch.file_bytes
    if sandbox is not None:
        argv = sandbox.argv(command, file_bytes=file_bytes, egress_socket=egress_socket)
    elif file_bytes is not None:
        blocks = file_size_blocks(file_bytes)
        bounded = f'ulimit -f {blocks} && {IGNORE_FILE_SIZE_SIGNAL} && exec /bin/bash -c "$1"'
        argv = ["/bin/bash", "-c", bounded, "bash", command]
    else:
        argv = ["/bin/bash", "-c", command]
    group = _call_group(sandbox)
    if group is not None:
        argv = group.join_argv(argv)
    try:
        result = await _run(argv, cwd=cwd, time_limit=time_limit, env=env, limits=limits, sandbox=sandbox, watch=watch)
    finally:
        if group is not None:
            kills = group.memory_kills()
            await asyncio.shield(asyncio.to_thread(group.remove))
    return result if group is None else dataclasses.replace(result, memory_kills=kills)


def _call_group(sandbox: Sandbox | None) -> CallGroup | None:
    """The call's own cgroup, when its sandbox has them; a call that cannot have its bound is refused."""
    if sandbox is None or sandbox.cgroups is None:
        return None
    bounds = sandbox.bounds
    try:
        return open_call_group(sandbox.cgroups, memory=bounds.max_memory_bytes, processes=bounds.max_processes)
    except OSError as exc:
        raise ToolError(f"the call's memory bound could not be set up ({exc}); bash did not run") from exc


async def _run(
    argv: list[str],
    *,
    cwd: str,
    time_limit: float,
    env: dict[str, str],
    limits: OutputLimits,
    sandbox: Sandbox | None,
    watch: SizeWatch | None,
) -> ShellResult:
    shaper = StreamShaper(limits)
    output = _Output(shaper)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output.write_fd,
            stderr=output.write_fd,
            start_new_session=True,
            # bwrap's --die-with-parent does this for the sandbox.
            preexec_fn=_die_with_parent if sandbox is None else None,
        )
    except BaseException:
        output.close()
        raise
    finally:
        os.close(output.write_fd)  # the command has its copy; EOF comes when the last holder is gone
    watcher = None if watch is None else asyncio.create_task(usage.watch_until_over(watch.root, watch.ceiling))
    timed_out = False
    over_limit: int | None = None
    try:
        try:
            over_limit = await asyncio.wait_for(_exit_or_overflow(process, watcher), time_limit)
        except TimeoutError:
            timed_out = True
        if timed_out or over_limit is not None:
            _kill_group(process)
            await process.wait()
        _, pending = await asyncio.wait({output.ended}, timeout=DRAIN_SECONDS)
        if pending:  # something the command started still holds the output open
            _kill_group(process)
            await asyncio.wait({output.ended}, timeout=DRAIN_SECONDS)
    except asyncio.CancelledError:
        _kill_group(process)
        await asyncio.shield(process.wait())
        raise
    finally:
        output.close()
        if watcher is not None:
            watcher.cancel()
    if output.ended.done():
        output.ended.result()  # raises the pipe's read error, if it had one
    stopped = timed_out or over_limit is not None
    return ShellResult(shaper.result(), None if stopped else process.returncode, timed_out, over_limit)


async def _exit_or_overflow(process: asyncio.subprocess.Process, watcher: asyncio.Task[int] | None) -> int | None:
    """Waits for the command to exit (None) or the workspace to pass its ceiling (what it holds)."""
    if watcher is None:
        await process.wait()
        return None
    exited = asyncio.ensure_future(process.wait())
    try:
        await asyncio.wait({exited, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        exited.cancel()
    return watcher.result() if watcher.done() and not exited.done() else None


def _timeout(arguments: dict[str, Any]) -> float:
    value = arguments.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if value is None:
        return DEFAULT_TIMEOUT_SECONDS
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_SECONDS:
        raise ToolError(f"argument 'timeout_seconds' must be a number above 0 and at most {MAX_TIMEOUT_SECONDS}")
    return float(value)


async def bash_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    command = require_str(arguments, "command")
    assert command is not None
    timeout = _timeout(arguments)
    workspace = context.workspace
    sandbox = workspace.sandbox
    if sandbox is not None and sandbox.egress is not None and context.network is not None:
        # Read at each call: a host granted a moment ago (request_network_access) counts at once.
        sandbox = dataclasses.replace(sandbox, egress=await context.network.policy(sandbox.egress))
    env = command_environment(context.bash_env_allow)
    bound = await usage.bash_ceiling(workspace.root, workspace.max_bytes)
    watch = None if bound is None else SizeWatch(workspace.root, bound[0], bound[0] - bound[1])
    result = await run_shell(
        command,
        cwd=str(workspace.root),
        time_limit=timeout,
        env=env if sandbox is None else sandbox.environment(env),
        limits=context.output_limits,
        sandbox=sandbox,
        watch=watch,
    )
    output = result.output.text.rstrip("\n")
    if result.over_limit is not None:
        status = (
            f"[stopped: the workspace passed its size limit of {workspace.max_bytes:,} bytes "
            f"(AGENT_WORKSPACE_MAX_BYTES), holding {result.over_limit:,}; the command and its child processes "
            "were killed. Remove files to bring it back under the limit: deleting always works]"
        )
    elif result.timed_out:
        status = f"[timed out after {timeout:g} s; the command and its child processes were killed]"
    elif result.exit_code is not None and result.exit_code < 0:
        status = f"[killed by signal {-result.exit_code}]"
    else:
        status = f"[exit code {result.exit_code}]"
    if result.memory_kills and sandbox is not None:
        status += (
            f" [{result.memory_kills} of its processes killed: together they passed the call's memory bound of "
            f"{sandbox.bounds.max_memory_bytes >> 20} MiB (AGENT_BASH_MAX_MEMORY_BYTES)]"
        )
    if watch is not None and result.over_limit is None and (watch.file_bytes == 0 or "File too large" in output):
        status += (
            f" [no file may grow past the {watch.file_bytes:,} bytes the workspace had left under its size limit "
            f"of {workspace.max_bytes:,} (AGENT_WORKSPACE_MAX_BYTES); removing files always works]"
        )
    body = f"{output}\n{status}" if output else f"(no output)\n{status}"
    if result.network is not None and result.network.connections:
        body += "\n" + result.network.summary()
        if context.network is not None:
            await context.network.record(CURRENT_CALL_ID.get(), result.network)
    # A command that ran and failed is a result, not a tool error; one that never finished is.
    shaped = result.output
    return ToolOutput(
        body,
        is_error=result.timed_out or result.over_limit is not None,
        line_count=shaped.lines,
        byte_count=shaped.bytes,
        truncated=shaped.truncated,
    )


BASH = Tool(
    name="bash",
    description=(
        "Run a command with /bin/bash -c in the workspace directory, in a sandbox (no network unless the "
        "server allows it, and then only through a proxy (HTTP, HTTPS, SOCKS5) that may refuse a host, saying why; "
        "nothing writable outside the workspace but /tmp and $HOME, which are emptied after "
        "each call); stdout and stderr are returned "
        f"together with the exit code. Times out after timeout_seconds (default {DEFAULT_TIMEOUT_SECONDS}, "
        f"at most {MAX_TIMEOUT_SECONDS}), killing the command and its children. There is no terminal and no "
        "input; long output keeps its beginning and end. Credentials are not in the environment."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command."},
            "timeout_seconds": {"type": "number", "description": f"At most {MAX_TIMEOUT_SECONDS}."},
        },
        "required": ["command"],
    },
    func=bash_tool,
    targets=CommandTargets(),
    read_only=False,
    writes_files=True,
)
