"""The MCP servers of this server process: started once, shared by its runs, stopped at shutdown.

The configuration is read from MCP_SERVERS (the ``.mcp.json`` file) and the admin's servers when a
run asks for its tools (at most every two seconds, and at once after a change: ``ConfiguredServers``),
and the running servers are brought in line with it (``reconcile``): a server that appeared is
started (and waited for, up to its start timeout, so the run sees its tools), one that vanished or
changed is stopped. At start-up (the ASGI lifespan) the same happens before the first request.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.models.signals import post_delete, post_save

from agents.mcp.config import McpConfigError, ServerConfig, check_allowed_variables, file_servers
from agents.mcp.names import Clash, unique_names
from agents.models import McpServerEntry
from agents.refreshed import Refreshed
from orchestrator.tools.base import Tool

# The MCP SDK (agents/mcp/connection.py and tools.py import it) weighs about 25 MiB with the
# starlette and cryptography it brings, and most processes have no MCP server: it is imported when
# the first server is started, so a process without one never loads it (issue #27).
if TYPE_CHECKING:
    from agents.mcp.connection import McpServer, Timeouts

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class ServerStatus:
    """What /agui/info, the REST API and the admin show of a server: never a secret."""

    name: str
    transport: str
    state: str
    tool_count: int
    tools: tuple[str, ...]  # the names the model sees
    last_error: str
    source: str
    restarts: int


class McpPool:
    def __init__(self) -> None:
        self.servers: dict[str, McpServer] = {}
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        self._told: set[Clash] = set()

    async def reconcile(self, configs: Sequence[ServerConfig]) -> None:
        """Runs exactly the enabled servers of ``configs``; new ones are waited for (bounded)."""
        wanted = {config.name: config for config in configs if config.enabled}
        async with self._lock:
            gone = [server for name, server in self.servers.items() if wanted.get(name) != server.config]
            for server in gone:
                del self.servers[server.name]
            await asyncio.gather(*(server.stop() for server in gone))
            started = []
            new = [config for name, config in wanted.items() if name not in self.servers]
            if new:
                # The SDK's first import takes about a second: on a thread, not the event loop.
                connection = await asyncio.to_thread(importlib.import_module, "agents.mcp.connection")
            for config in new:
                server = connection.McpServer(
                    config,
                    timeouts=_timeouts(connection),
                    cwd=str(settings.AGENT_WORKSPACE),
                    stderr_path=Path(settings.DATA_DIR) / "mcp" / f"{config.name}.stderr.log",
                    max_message_bytes=settings.MCP_MAX_MESSAGE_BYTES,
                )
                self.servers[config.name] = server
                server.start()
                started.append(server)
            if started:
                await asyncio.gather(*(server.wait_started() for server in started))
                for server in started:
                    if not server.up:
                        log.warning("MCP server %r did not start: %s", server.name, server.last_error)

    async def stop(self) -> None:
        """Stops every server (shutdown)."""
        async with self._lock:
            servers, self.servers = list(self.servers.values()), {}
            await asyncio.gather(*(server.stop() for server in servers))

    def chosen(self, names: Iterable[str] | None) -> list[McpServer]:
        """The servers of ``names`` (every one when None), by name."""
        wanted = None if names is None else set(names)
        return [self.servers[n] for n in sorted(self.servers) if wanted is None or n in wanted]

    def named(self, taken: Iterable[str] = ()) -> tuple[dict[tuple[str, str], str], list[Clash]]:
        """The model's name of each (server, tool) of every server that offers its tools, whichever
        runs ask: a name clashing with another's, or with one of ``taken``, is left out (and logged
        once), so a rule naming it can never reach another tool (agents/mcp/names.py)."""
        offering = [server for server in self.chosen(None) if server.offers_tools]
        listed = [(server.name, tool.name) for server in offering for tool in server.tools]
        names, clashes = unique_names(listed, taken)
        for clash in clashes:
            if clash not in self._told:
                self._told.add(clash)
                log.error("MCP tools refused: %s; rename one of the servers or tools", clash)
        return names, clashes

    def tools(self, names: Iterable[str] | None, taken: Iterable[str] = ()) -> list[Tool]:
        """The tools of the chosen servers that are up or restarting (a call waits for the restart),
        none named as one of ``taken`` nor as another server's tool."""
        named, _ = self.named(taken)
        tools: dict[str, Tool] = {}
        for server in self.chosen(names):
            if not server.offers_tools:
                continue
            from agents.mcp.tools import mcp_tool  # a server was up: the SDK is loaded already

            for listed in server.tools:
                name = named.get((server.name, listed.name))
                if name is not None and name not in tools:  # a tool listed twice is offered once
                    tools[name] = mcp_tool(server, listed, name)
        return list(tools.values())

    def statuses(self, names: Iterable[str] | None, taken: Iterable[str] = ()) -> list[ServerStatus]:
        named, clashes = self.named(taken)
        statuses = []
        for server in self.chosen(names):
            listed = [tool.name for tool in server.tools] if server.offers_tools else []
            offered = tuple(dict.fromkeys(named[server.name, tool] for tool in listed if (server.name, tool) in named))
            refused = [str(clash) for clash in clashes if any(held == server.name for held, _ in clash.tools)]
            statuses.append(
                ServerStatus(
                    name=server.name,
                    transport=server.config.transport,
                    state=server.state.value,
                    tool_count=len(offered),
                    tools=offered,
                    last_error="; ".join([server.last_error, *refused] if server.last_error else refused),
                    source=server.config.source,
                    restarts=server.restarts,
                )
            )
        return statuses


def _timeouts(connection: ModuleType) -> Timeouts:
    timeouts: Timeouts = connection.Timeouts(
        call=settings.MCP_CALL_TIMEOUT_SECONDS,
        start=settings.MCP_START_TIMEOUT_SECONDS,
        backoff_first=settings.MCP_RESTART_BACKOFF_SECONDS,
        backoff_max=settings.MCP_RESTART_BACKOFF_MAX_SECONDS,
    )
    return timeouts


_POOL: McpPool | None = None


def mcp_pool() -> McpPool:
    """This process's pool (one per event loop: a test's loop that ended took its servers with it)."""
    global _POOL
    if _POOL is None or _POOL._loop is not asyncio.get_running_loop():
        _POOL = McpPool()
    return _POOL


def configured_servers() -> list[ServerConfig]:
    """The servers of the MCP_SERVERS file (none when it is blank), then the admin's. An admin server
    whose name the file has too is left out (the admin refuses such a name, but the file may have
    gained it since) and logged; so is one that no longer passes the file's checks."""
    servers = file_servers()
    taken = {server.name for server in servers}
    try:
        entries = list(McpServerEntry.objects.all())
    except Exception as exc:  # a database not migrated yet, or not reachable: the file's servers still run
        log.error("the admin's MCP servers cannot be read; only the file's are started: %s", exc)
        return servers
    for entry in entries:
        if entry.name in taken:
            log.error("MCP server %r of the admin is not started: MCP_SERVERS has one of that name", entry.name)
            continue
        try:
            config = entry.as_config()
            check_allowed_variables(config)  # an entry saved before MCP_ENV_ALLOWLIST was narrowed
            servers.append(config)
        except McpConfigError as exc:
            log.error("MCP server %r of the admin is not started: %s", entry.name, exc)
    return servers


def _file_stamp() -> tuple[int, int, int] | None:
    """What changes when the MCP_SERVERS file is written (None when there is none)."""
    path: str = settings.MCP_SERVERS
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return None
    return (stat.st_ino, stat.st_mtime_ns, stat.st_size) if stat else None


async def _stamped_servers() -> tuple[list[ServerConfig], tuple[int, int, int] | None]:
    stamp = _file_stamp()  # before the read: a write of the file during it is seen by the next call
    read = sync_to_async(configured_servers, thread_sensitive=True)
    # An empty context, so asgiref picks its process-wide thread (the one the runs' database work
    # uses) rather than a request's executor, which is gone once the request has ended.
    servers = await asyncio.get_running_loop().create_task(read(), context=contextvars.Context())
    return servers, stamp


class ConfiguredServers:
    """``configured_servers()`` as last read (agents/refreshed.py): read again in the background once
    ``ttl`` seconds have passed, at once when the MCP_SERVERS file changes, and at once in this process
    when the admin saves or deletes a server (the signals below); another process's admin edit is seen
    within ``ttl`` under load and ``2 * ttl`` at most, as the agents are (agui/views.py EnabledAgents).

    Every run and every /agui/info asks for it, and a read waited on the database thread behind the
    runs' event logs: with 500 replies streaming, /agui/info took 100-250 ms instead of 2 when it read
    every time, and its p99 was 150 ms when it still waited for a re-read every two seconds
    (bench/stream.py --operators, issue #27 item 5)."""

    def __init__(self, ttl: float = 2.0) -> None:
        self._read = Refreshed(_stamped_servers, ttl=ttl, name="the MCP configuration")

    @property
    def ttl(self) -> float:
        return self._read.ttl

    @ttl.setter
    def ttl(self, seconds: float) -> None:
        self._read.ttl = seconds

    def forget(self, *_args: object, **_kwargs: object) -> None:
        self._read.forget()

    async def get(self) -> list[ServerConfig]:
        held = self._read.value
        if held is not None and held[1] != _file_stamp():
            self._read.forget()
        servers, _stamp = await self._read.current()
        return servers

    async def keep_fresh(self) -> None:
        await self._read.keep_fresh()


CONFIGURED_SERVERS = ConfiguredServers()
post_save.connect(CONFIGURED_SERVERS.forget, sender=McpServerEntry, dispatch_uid="mcp-configured-servers-saved")
post_delete.connect(CONFIGURED_SERVERS.forget, sender=McpServerEntry, dispatch_uid="mcp-configured-servers-deleted")


def current_pool() -> McpPool | None:
    """The pool as it is, from any thread (for reads that must not start anything)."""
    return _POOL


def server_statuses() -> dict[str, ServerStatus]:
    """This process's servers as they are now, by name, from any thread (for the admin: it starts
    nothing, so a server the pool has not been brought in line with yet is not among them)."""
    pool = current_pool()
    return {status.name: status for status in pool.statuses(None)} if pool is not None else {}


async def mcp_servers_ready() -> McpPool:
    """The pool, in line with the configuration (servers started on first use)."""
    pool = mcp_pool()
    try:
        configs = await CONFIGURED_SERVERS.get()
    except McpConfigError as exc:
        # Checked at start-up; changed since. The servers running go on; the operator is told.
        log.error("MCP_SERVERS cannot be read any more; the servers running are kept: %s", exc)
        return pool
    await pool.reconcile(configs)
    return pool


async def stop_mcp_servers() -> None:
    if _POOL is not None and _POOL._loop is asyncio.get_running_loop():
        await _POOL.stop()
