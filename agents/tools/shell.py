"""bash: run a shell command in the workspace, with a timeout, a capped output and no secrets.

The command runs in a session (and process group) of its own; on timeout or cancellation the
whole group is killed, so no child outlives the call. Background processes still holding the
output pipe when the command exits are killed as well."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from typing import Any

from agents.tools.base import Tool, ToolContext, ToolError, ToolOutput, require_str

DEFAULT_TIMEOUT_SECONDS = 120
MAX_TIMEOUT_SECONDS = 600
OUTPUT_HEAD_BYTES = 15_000  # the output keeps this much of its beginning and of its end
OUTPUT_TAIL_BYTES = 15_000
DRAIN_SECONDS = 1.0  # after the command exits, how long leftovers may keep the output open
_READ_CHUNK = 65_536

# Variables whose names contain one of these, or start with one of the prefixes, never reach the command.
SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "PRIVATE")
SECRET_PREFIXES = ("ANTHROPIC_", "AGUI_", "DJANGO_", "DATABASE_URL", "REDIS_URL")
# Commands are not interactive: no pager waits for a key, git never prompts for a password.
_FIXED_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0"}


def is_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS) or upper.startswith(SECRET_PREFIXES)


def scrubbed_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment without anything that looks like a credential."""
    source = dict(os.environ) if environ is None else environ
    env = {name: value for name, value in source.items() if not is_secret(name)}
    env.update(_FIXED_ENV)
    return env


@dataclass(slots=True)
class _Capture:
    """Keeps the head and the tail of a stream of bytes, and counts the rest."""

    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = OUTPUT_HEAD_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > OUTPUT_TAIL_BYTES:
            del self.tail[:-OUTPUT_TAIL_BYTES]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        if dropped <= 0:
            return bytes(self.head + self.tail).decode("utf-8", errors="replace")
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        return f"{head}\n[... {dropped:,} bytes of output omitted ({self.total:,} in all) ...]\n{tail}"


async def _pump(stream: asyncio.StreamReader, capture: _Capture) -> None:
    while chunk := await stream.read(_READ_CHUNK):
        capture.feed(chunk)


async def _open_output() -> tuple[int, asyncio.StreamReader, asyncio.ReadTransport]:
    """A pipe of our own for the command's output: Process.wait() would otherwise also wait for the
    pipe to close, which a background child can hold open; this one we close when we are done."""
    read_fd, write_fd = os.pipe()
    stream = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(read_fd, "rb", buffering=0)
        )
    except BaseException:
        os.close(write_fd)
        raise
    return write_fd, stream, transport


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


@dataclass(slots=True, frozen=True)
class ShellResult:
    output: str
    exit_code: int | None
    timed_out: bool


async def run_shell(command: str, *, cwd: str, time_limit: float, env: dict[str, str]) -> ShellResult:
    """Runs ``command`` with /bin/bash -c; stdout and stderr are interleaved into one output."""
    write_fd, stream, transport = await _open_output()
    try:
        process = await asyncio.create_subprocess_exec(
            "/bin/bash",
            "-c",
            command,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_fd,
            stderr=write_fd,
            start_new_session=True,
        )
    except BaseException:
        transport.close()
        raise
    finally:
        os.close(write_fd)  # the command has its copy; EOF comes when the last holder is gone
    capture = _Capture()
    reader = asyncio.create_task(_pump(stream, capture))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(process.wait(), time_limit)
        except TimeoutError:
            timed_out = True
            _kill_group(process)
            await process.wait()
        _, pending = await asyncio.wait({reader}, timeout=DRAIN_SECONDS)
        if pending:  # something the command started still holds the output open
            _kill_group(process)
            await asyncio.wait({reader}, timeout=DRAIN_SECONDS)
    except asyncio.CancelledError:
        _kill_group(process)
        await asyncio.shield(process.wait())
        raise
    finally:
        reader.cancel()
        transport.close()
    return ShellResult(capture.text(), None if timed_out else process.returncode, timed_out)


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
    result = await run_shell(command, cwd=str(context.workspace.root), time_limit=timeout, env=scrubbed_environment())
    output = result.output.rstrip("\n")
    if result.timed_out:
        status = f"[timed out after {timeout:g} s; the command and its child processes were killed]"
    elif result.exit_code is not None and result.exit_code < 0:
        status = f"[killed by signal {-result.exit_code}]"
    else:
        status = f"[exit code {result.exit_code}]"
    body = f"{output}\n{status}" if output else f"(no output)\n{status}"
    # A command that ran and failed is a result, not a tool error; one that never finished is.
    return ToolOutput(body, is_error=result.timed_out)


BASH = Tool(
    name="bash",
    description=(
        "Run a command with /bin/bash -c in the workspace directory; stdout and stderr are returned "
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
    read_only=False,
)
