"""One MCP server, looked after: started once per server process, shared by its runs.

``McpServer`` runs a supervisor task that opens the transport (a stdio process, or a streamable
HTTP session), initialises, lists the tools, and then waits until the connection ends, the server
misbehaves, or a call found it unresponsive; then it starts it again, with backoff. Calls in flight
when it went down get a tool error ("connection closed"). A server that was up keeps its tools while it
restarts (issue #42: the model was told "unknown tool" then): a call made then waits for the restart
within its timeout, or fails at once saying when the server will be started again. A server that never
came up offers no tools."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio
import mcp.types as mcp_types
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from agents.mcp.config import HTTP, ServerConfig
from agents.mcp.elicitation import Asked, Questions
from agents.mcp.redaction import redact, secret_values
from agents.mcp.revisions import call_modern, negotiate
from agents.mcp.sandboxing import stdio_process
from agents.mcp.stdio import OVERSIZED, stdio_transport
from orchestrator.tools.inputs import CallInputs

log = logging.getLogger(__name__)

# A server that lists more tools than this is cut to it (and the operator told): each tool's
# description and schema is sent with every model call.
MAX_TOOLS = 200
MAX_LIST_PAGES = 50
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # MCP_MAX_MESSAGE_BYTES: eight 5 MB images fit, base64 and all
PING_SECONDS = 5.0

ProgressListener = ProgressFnT
Progress = ProgressListener | None


class ServerState(StrEnum):
    STARTING = "starting"
    UP = "up"
    DOWN = "down"
    STOPPED = "stopped"


class McpUnavailable(Exception):
    """The server cannot take the call (down, restarting, or it went away during it)."""


class McpAnswerTooLarge(Exception):
    """The server's answer to a call was over the byte bound, and dropped unread."""


@dataclass(slots=True, frozen=True)
class Timeouts:
    call: float = 60.0  # a tools/call, MCP_CALL_TIMEOUT_SECONDS
    start: float = 30.0  # start, initialise and list the tools
    backoff_first: float = 1.0
    backoff_max: float = 60.0


class McpServer:
    def __init__(
        self,
        config: ServerConfig,
        *,
        timeouts: Timeouts,
        cwd: str = "",
        stderr_path: Path | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ):
        """``cwd``: where a stdio server runs when its configuration names no ``cwd`` and MCP_SANDBOX=off
        (in its sandbox it starts in its scratch /tmp); ``stderr_path``:
        where its stderr goes (its tail is shown as the last error when it fails to start);
        ``max_message_bytes``: the largest message of a stdio server that is read."""
        self.config = config
        self.max_message_bytes = max_message_bytes
        self.timeouts = timeouts
        self.default_cwd = cwd
        self.stderr_path = stderr_path
        self.state = ServerState.STARTING
        self._secrets = secret_values(config)
        self._last_error = ""
        self.tools: list[mcp_types.Tool] = []
        self.restarts = 0
        self.started_at = 0.0
        self.tools_changed: Callable[[McpServer], None] | None = None
        self._session: ClientSession | None = None
        self._questions = Questions()  # elicitation/create during calls (older revisions)
        self._broken = asyncio.Event()  # set to make the supervisor start the server again
        self._attempted = asyncio.Event()  # the first start has succeeded or failed
        self._task: asyncio.Task[None] | None = None
        self._relist: asyncio.Task[None] | None = None
        self._notice = ""
        self._changed = asyncio.Event()  # set (and replaced) at each change of state
        self._ever_up = False
        self._up_since = 0.0  # time.monotonic() when it last came up
        self._next_start = 0.0  # time.monotonic() of the next start while it is down; 0 when not known yet

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def last_error(self) -> str:
        """Why it is down, or what the operator should know although it is up; never a secret."""
        return self._last_error

    @last_error.setter
    def last_error(self, text: str) -> None:
        self._last_error = self.redact(text)

    def redact(self, text: str) -> str:
        """``text`` without this server's secrets (agents/mcp/redaction.py)."""
        return redact(text, self._secrets)

    @property
    def up(self) -> bool:
        return self.state is ServerState.UP

    @property
    def offers_tools(self) -> bool:
        """Whether its tools are offered: it is up, or it was and is being started again."""
        return self.up or (self._ever_up and self.state is not ServerState.STOPPED)

    @property
    def restarting(self) -> bool:
        return self._ever_up and self.state in (ServerState.STARTING, ServerState.DOWN)

    def _set_state(self, state: ServerState) -> None:
        self.state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def wait_started(self) -> None:
        """Waits until the first start has succeeded or failed (bounded by the start timeout)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), self.timeouts.start + 1)

    async def stop(self) -> None:
        """Stops the server (its process is closed, then terminated, then killed)."""
        task, self._task = self._task, None
        self._set_state(ServerState.STOPPED)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def call(
        self, tool: str, arguments: dict[str, Any], *, progress: Progress = None, inputs: CallInputs | None = None
    ) -> mcp_types.CallToolResult | Asked:
        """``tool``'s result, or ``Asked``: the server asked the person (agents/mcp/elicitation.py;
        ``inputs``: the answers so far). Raises McpUnavailable (down, or gone during the call),
        TimeoutError (MCP's cancellation sent), MCPError (a protocol error), Declined (sampling, roots).
        Cancelling the caller cancels the call; a restarting server is waited for, within the timeout."""
        deadline = time.monotonic() + self.timeouts.call
        session = await self._session_by(deadline)
        once = functools.partial(self._call_once, session, tool, arguments, deadline, progress)
        if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await call_modern(once, inputs, self.name)
        result = await self._questions.ask_during(once, inputs)
        if isinstance(result, mcp_types.InputRequiredResult):  # not of this era: a broken server
            raise McpUnavailable(f"MCP server {self.name!r} answered input_required without discover")
        return result

    async def _call_once(
        self,
        session: ClientSession,
        tool: str,
        arguments: dict[str, Any],
        deadline: float,
        progress: Progress,
        **retry: Any,
    ) -> mcp_types.CallToolResult | mcp_types.InputRequiredResult:
        try:
            result: mcp_types.CallToolResult | mcp_types.InputRequiredResult = await session.call_tool(
                tool,
                arguments,
                read_timeout_seconds=max(deadline - time.monotonic(), 0.001),
                progress_callback=progress,
                allow_input_required=True,
                **retry,
            )
        except MCPError as exc:
            if exc.error.code == mcp_types.CONNECTION_CLOSED:
                self._fail("the connection closed during a call")
                raise McpUnavailable(
                    f"MCP server {self.name!r} went away during the call (whether the call took effect is "
                    "unknown); it is being started again"
                ) from None
            if exc.error.data == OVERSIZED:
                raise McpAnswerTooLarge(f"MCP server {self.name!r} {exc.error.message}") from None
            if exc.error.code == mcp_types.REQUEST_TIMEOUT:
                asyncio.get_running_loop().create_task(self._check_alive(session))
                raise TimeoutError(
                    f"MCP server {self.name!r} did not answer within {self.timeouts.call:g} s; the call was cancelled"
                ) from None
            raise
        return result

    async def _check_alive(self, session: ClientSession) -> None:
        """After a call timed out: a server that does not answer a ping either is started again."""
        try:
            await asyncio.wait_for(session.send_ping(), min(PING_SECONDS, self.timeouts.call))
        except Exception:
            if session is self._session:
                self._fail("it stopped answering (a call timed out and a ping got no answer)")

    async def _session_by(self, deadline: float) -> ClientSession:
        """The session, once the server is up; a server that is restarting is waited for until
        ``deadline`` (``time.monotonic()``), unless its next start is known to come after it."""
        while True:
            session = self._session
            if session is not None and self.up:
                return session
            if not self.restarting:
                raise McpUnavailable(self._why_down())
            if self.state is ServerState.DOWN and self._next_start > deadline:
                raise McpUnavailable(self._why_restarting())
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), deadline - time.monotonic())
            except TimeoutError:
                raise McpUnavailable(self._why_restarting()) from None

    def _why_restarting(self) -> str:
        why = f"MCP server {self.name!r} is restarting ({self.last_error or 'it went down'})"
        if self.state is ServerState.DOWN and self._next_start:
            seconds = max(self._next_start - time.monotonic(), 0.0)
            at = datetime.fromtimestamp(time.time() + seconds, UTC).strftime("%H:%M:%S UTC")
            return f"{why}; it will be started again in {seconds:.0f} s (at {at}); call the tool again after that"
        waited = f"{self.timeouts.call:g} s"
        return f"{why}; it is being started again now and was not back within {waited}; call the tool again shortly"

    def _why_down(self) -> str:
        if self.state is ServerState.STARTING:
            return f"MCP server {self.name!r} is starting; try again shortly"
        if self.state is ServerState.STOPPED:
            return f"MCP server {self.name!r} is stopped"
        return f"MCP server {self.name!r} is down: {self.last_error or 'it is not running'}"

    def _fail(self, reason: str) -> None:
        if not self._broken.is_set():
            self.last_error = reason
            self._broken.set()
            if self.up:  # calls made from now on wait for the restart instead of reaching a dead session
                self._next_start = 0.0
                self._set_state(ServerState.DOWN)

    # -- the supervisor --------------------------------------------------------

    async def _supervise(self) -> None:
        failures = 0
        while True:
            self._set_state(ServerState.STARTING)
            self._broken = asyncio.Event()
            began = time.monotonic()
            try:
                await self._serve_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # ExceptionGroups of the transport's task groups among them
                if not self._broken.is_set():
                    self.last_error = _describe(exc) + self._stderr_tail()
            finally:
                self._session = None
                self._attempted.set()
            if self._up_since >= began or time.monotonic() - began > self.timeouts.start:
                failures = 0  # it ran: the next start is the first of a new series
            delay = min(self.timeouts.backoff_max, self.timeouts.backoff_first * 2**failures)
            failures += 1
            self.restarts += 1
            self._next_start = time.monotonic() + delay
            self._set_state(ServerState.DOWN)
            log.warning("MCP server %r is down (%s); starting it again in %.1f s", self.name, self.last_error, delay)
            await asyncio.sleep(delay)

    async def _serve_once(self) -> None:
        async with self._transport() as (read, write):
            forwarded, gone = await self._watched(read)
            async with (
                anyio.create_task_group() as group,
                ClientSession(
                    forwarded, write, message_handler=self._on_message, elicitation_callback=self._questions.on_elicit
                ) as session,
            ):
                group.start_soon(self._forward_end, gone)
                with anyio.fail_after(self.timeouts.start):
                    await negotiate(session)
                    self.tools = await self._list_tools(session)
                self._session = session
                self._ever_up = True
                self._up_since = time.monotonic()
                self._set_state(ServerState.UP)
                self.started_at = time.time()
                self.last_error = self._notice  # what the operator should know although it is up
                log.info("MCP server %r is up with %d tools", self.name, len(self.tools))
                if self.tools_changed is not None:
                    self.tools_changed(self)
                self._attempted.set()
                await self._broken.wait()
                group.cancel_scope.cancel()
            if not self.last_error:
                self.last_error = "the connection ended"

    async def _forward_end(self, gone: anyio.Event) -> None:
        await gone.wait()
        self._fail("the server closed the connection (it exited)" + self._stderr_tail())

    async def _watched(
        self, read: MemoryObjectReceiveStream[SessionMessage | Exception]
    ) -> tuple[MemoryObjectReceiveStream[SessionMessage | Exception], anyio.Event]:
        """The transport's read stream, forwarded, and an event set when it ends: how the end of a
        connection (a server that exited) is noticed between calls."""
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        gone = anyio.Event()

        async def forward() -> None:
            try:
                async with send:
                    async for item in read:
                        await send.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                pass
            finally:
                gone.set()

        self._forwarder = asyncio.get_running_loop().create_task(forward())
        return receive, gone

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        expanded = self.config.expanded()
        try:
            if self.config.transport == HTTP:
                client = create_mcp_http_client(headers=expanded.headers or None)
                async with client, streamable_http_client(expanded.url, http_client=client) as streams:
                    yield streams[0], streams[1]
            else:
                process = stdio_process(self.config, expanded, default_cwd=self.default_cwd)
                with self._stderr() as errlog:
                    async with process as run:
                        params = StdioServerParameters(command=run.command, args=run.args, env=run.env, cwd=run.cwd)
                        transport = stdio_transport(params, errlog=errlog, max_message_bytes=self.max_message_bytes)
                        async with transport as streams:
                            yield streams[0], streams[1]
        finally:
            forwarder = getattr(self, "_forwarder", None)
            if forwarder is not None:
                forwarder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await forwarder

    @contextlib.contextmanager
    def _stderr(self) -> Any:
        if self.stderr_path is None:
            with open("/dev/null", "w") as sink:
                yield sink
            return
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "w", encoding="utf-8") as sink:
            yield sink

    def _stderr_tail(self) -> str:
        if self.stderr_path is None:
            return ""
        try:
            with open(self.stderr_path, "rb") as log_file:
                log_file.seek(0, 2)
                size = log_file.tell()
                log_file.seek(max(0, size - 400))
                tail = log_file.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; its stderr ends: {tail}" if tail else ""

    async def _list_tools(self, session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        self._notice = ""
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            listed = await session.list_tools(params=params)
            tools.extend(listed.tools)
            cursor = listed.next_cursor
            if not cursor:
                break
        if len(tools) > MAX_TOOLS:
            log.warning("MCP server %r lists %d tools; only the first %d are offered", self.name, len(tools), MAX_TOOLS)
            self._notice = f"it lists {len(tools)} tools; only the first {MAX_TOOLS} are offered"
            tools = tools[:MAX_TOOLS]
        return tools

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            # A stdio server may write only MCP messages to stdout: anything else means it is broken,
            # and a call waiting for an answer would wait for nothing. Start it again.
            self._fail(f"it sent something that is not an MCP message ({_describe(message)})")
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            self._relist = asyncio.get_running_loop().create_task(self._refresh_tools())

    async def _refresh_tools(self) -> None:
        session = self._session
        if session is None:
            return
        try:
            with anyio.fail_after(self.timeouts.start):
                tools = await self._list_tools(session)
        except Exception as exc:
            log.warning("MCP server %r: listing its tools again failed: %s", self.name, self.redact(_describe(exc)))
            return
        if session is self._session:
            self.tools = tools
            log.info("MCP server %r changed its tools: %d now", self.name, len(tools))
            if self.tools_changed is not None:
                self.tools_changed(self)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    if isinstance(exc, TimeoutError):
        return "it did not start (initialise and list its tools) in time"
    if isinstance(exc, FileNotFoundError):
        return f"its command was not found ({exc.filename or exc})"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "…"
