"""What a tool is, and what the tools of one run share."""

from __future__ import annotations

import asyncio
import contextvars
import errno
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from orchestrator.events import ToolProgress
from orchestrator.tools import usage
from orchestrator.tools.egressproxy import NetworkAccess
from orchestrator.tools.errors import ToolError
from orchestrator.tools.inputs import CallInputs, InputRequest
from orchestrator.tools.netguard import WebConfig
from orchestrator.tools.shaping import OutputLimits, shape_tool_output
from orchestrator.tools.targets import NO_TARGETS, Targets
from orchestrator.tools.workspace import Workspace

__all__ = ["Tool", "ToolContext", "ToolError", "ToolKind", "ToolOutput", "ToolRegistry", "Workspace"]


@dataclass(slots=True)
class ToolOutput:
    content: str
    is_error: bool = False
    touched: tuple[tuple[str, str], ...] = ()  # (path relative to the workspace, action)
    # Set by ToolRegistry.call: the size of the output before shaping, and whether it was cut.
    line_count: int | None = None
    byte_count: int | None = None
    truncated: bool = False
    # Image blocks the model sees beside ``content`` (an MCP tool's images), in the model API's shape.
    images: tuple[dict[str, Any], ...] = ()
    # The call needs the person before it can end (an MCP server's elicitation): the run waits on
    # it and makes the call again with the answer (orchestrator/tools/inputs.py).
    needs_input: InputRequest | None = None


TodoItem = dict[str, str]  # {"id", "content", "status"}


@dataclass(slots=True)
class ToolContext:
    """What the tools of one run share. Make one per run; sub-agents get their own."""

    workspace: Workspace
    # The read ledger: path relative to the workspace -> hash of the content the agent last saw
    # (recorded by file_read and after every write). Edits of files not in it, or changed on disk
    # since, are refused (the stale-edit check, see orchestrator/tools/ledger.py).
    reads: dict[str, str] = field(default_factory=dict)
    # The run's todo list as todo_write last set it; on_todos is told after every change.
    todos: list[TodoItem] = field(default_factory=list)
    on_todos: Callable[[list[TodoItem]], None] | None = None
    output_limits: OutputLimits = field(default_factory=OutputLimits)
    # Set when a person cancels the run: a call that can stop in flight (an MCP server's) stops then,
    # rather than at the run's next safe point. A sub-agent shares its parent's.
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    # Serialises check-then-write of the file tools when the model calls them in parallel.
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # What the web tools may reach and how much they read (orchestrator/tools/web.py).
    web: WebConfig = field(default_factory=WebConfig)
    # Told how far a call in flight is (an MCP tool's progress notifications); set by the loop.
    on_progress: Callable[[ToolProgress], None] | None = None
    # The server's environment variables bash sees besides its fixed allowlist (AGENT_BASH_ENV_ALLOW).
    bash_env_allow: tuple[str, ...] = ()
    # The answers a call that asked the person is made again with, by the model's call id.
    inputs: dict[str, CallInputs] = field(default_factory=dict)
    # The agent's host lists, the thread's grants and the record of bash's network use (issue #47);
    # None: the operator's settings alone, nothing recorded.
    network: NetworkAccess | None = None

    def progress(self, call_id: str, name: str, progress: float, total: float | None = None, message: str = "") -> None:
        """Reports how far the call ``call_id`` of the tool ``name`` is."""
        if self.on_progress is not None:
            self.on_progress(ToolProgress(call_id, name, progress, total, message))


# The id of the tool call the current task runs (``ToolRegistry.call``): each call runs in a task of
# its own (the loop gathers them), so a tool's function reads its call's id from here.
CURRENT_CALL_ID: contextvars.ContextVar[str] = contextvars.ContextVar("tool_call_id", default="")


ToolFunc = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutput]]


class ToolKind(StrEnum):
    """Who carries out a call of the tool."""

    # Its function runs here, on the workspace or the web, once the permission rules allow it.
    WORKSPACE = "workspace"
    # The run itself answers it (ask_user, grounding_report, sub_agent); its function is never called.
    RUN = "run"
    # Declared by the client (AG-UI frontend tools): the client runs it and sends the result.
    CLIENT = "client"


@dataclass(slots=True, frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    func: ToolFunc
    read_only: bool = True
    kind: ToolKind = ToolKind.WORKSPACE
    # What a permission rule's glob is matched against, and what a yes-always remembers
    # (orchestrator/tools/targets.py).
    targets: Targets = NO_TARGETS
    # Reaches the network (web_search, web_fetch): with no rule matching, each call asks, even
    # though it changes nothing in the workspace (agents/permissions.py).
    network: bool = False
    # Changes files of the workspace (file_write, file_edit, apply_patch, bash): after a call, the
    # workspace's size is measured again (issue #24); each holds the size limit itself.
    writes_files: bool = False
    # What a person reads when a call of it waits for approval, in place of the generic line
    # (an MCP tool names its server and says when the server marks it destructive).
    approval_text: Callable[[dict[str, Any]], str] | None = None
    # Arguments refused before anyone is asked (a person is not asked to approve nonsense): what
    # is wrong with them, or None.
    check: Callable[[dict[str, Any]], str | None] | None = None

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass(slots=True)
class ToolRegistry:
    tools: dict[str, Tool] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> ToolRegistry:
        return cls({tool.name: tool for tool in tools})

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.tools.values()]

    async def call(self, name: str, arguments: dict[str, Any], context: ToolContext, call_id: str = "") -> ToolOutput:
        """Runs a tool; every failure comes back as an error output the model can read.
        Every output is shaped to the context's output limits (long ones keep head and tail).
        ``call_id``: the model's id of the call, which the tool's progress reports carry."""
        CURRENT_CALL_ID.set(call_id)
        return shape(await self._call(name, arguments, context), context.output_limits)

    async def _call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutput(f"unknown tool {name!r}; available: {', '.join(sorted(self.tools))}", True)
        for attempt in (1, 2):
            try:
                if tool.writes_files:
                    try:
                        return await tool.func(arguments, context)
                    finally:
                        usage.forget(context.workspace.root)  # the next check sees what this call wrote
                return await tool.func(arguments, context)
            except ToolError as exc:
                return ToolOutput(str(exc), True)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a tool bug must not kill the run; the model is told
                if attempt == 1 and is_transient(exc):
                    await asyncio.sleep(TRANSIENT_RETRY_DELAY)
                    continue
                return ToolOutput(f"{name} failed: {type(exc).__name__}: {exc}", True)
        raise AssertionError("unreachable")


TRANSIENT_RETRY_DELAY = 0.2
_TRANSIENT_ERRNOS = {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ETXTBSY, errno.ETIMEDOUT, errno.EMFILE}


def is_transient(exc: BaseException) -> bool:
    """A failure worth one more try: the resource was busy or the call was interrupted."""
    if isinstance(exc, (TimeoutError, ConnectionError, InterruptedError, BlockingIOError)):
        return True
    return isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS


def shape(output: ToolOutput, limits: OutputLimits) -> ToolOutput:
    if output.line_count is not None:  # the tool shaped it while reading (bash streams its output)
        return output
    shaped = shape_tool_output(
        output.content,
        max_bytes=limits.max_bytes,
        max_lines=limits.max_lines,
        keep_head=limits.keep_head,
        keep_tail=limits.keep_tail,
    )
    output.content = shaped.text
    output.line_count, output.byte_count, output.truncated = shaped.lines, shaped.bytes, shaped.truncated
    return output


def require_str(arguments: dict[str, Any], name: str, *, optional: bool = False) -> str | None:
    value = arguments.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or (not optional and value == ""):
        raise ToolError(f"argument {name!r} must be a non-empty string")
    return value


def optional_int(arguments: dict[str, Any], name: str, default: int, *, minimum: int = 0) -> int:
    value = arguments.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ToolError(f"argument {name!r} must be an integer of at least {minimum}")
    return value
