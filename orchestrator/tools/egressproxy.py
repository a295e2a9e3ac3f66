"""Bash's one way out to the network (issue #47): an HTTP proxy of Threadline's, one per bash call,
listening on a Unix socket in a private directory that only that call's sandbox has bound in. It
speaks HTTP proxying and, on the same port, SOCKS5 (for other TCP).

The sandbox has no network interface but its own loopback; a forwarder started in it (``FORWARDER``)
listens on ``127.0.0.1:PROXY_PORT`` there and relays each connection to the socket, so programs find
the proxy where ``http_proxy`` says. The proxy takes ``CONNECT host:port`` (HTTPS and any TLS) and
plain ``GET http://host/...`` requests (and SOCKS5 CONNECT), and for each: the operator's lists (``EgressPolicy``), the
command's bounds, then the name is resolved once and every address checked by netguard, and the
connection goes to a checked address (a name that rebinds to loopback afterwards gets nowhere).
A refusal is a 403 whose body names the host, the reason and the setting that would allow it; the
call's ``NetworkUsage`` records each connection for the tool's output, which is what the model reads
when a client (curl on a refused CONNECT) shows only the status."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

from orchestrator.tools.egress import EgressPolicy, HostPattern
from orchestrator.tools.egresswire import (
    SOCKS5,
    SOCKS_NOT_ALLOWED,
    SOCKS_SUCCEEDED,
    SOCKS_UNREACHABLE,
    answer_http,
    authority,
    http_destination,
    socks_destination,
    socks_reply,
    with_headers,
)
from orchestrator.tools.netguard import HostRefused, resolve_public

PROXY_PORT = 3128  # in the sandbox's own network namespace: nobody else's
SANDBOX_SOCKET = "/run/threadline/proxy.sock"  # where the call's socket is bound in the sandbox
_CHUNK = 256 * 1024
_MAX_NOTED = 20  # refusals listed in the tool's output, then a count
_HOW_TO_ASK = (
    "to reach it, call the request_network_access tool with the host (and port) and why you need it; once a person "
    "approves, run the command again"
)

# Run by /usr/bin/python3 -I in the sandbox, before the command: binds the listener, then forks, so
# the port is open by the time the command starts (the parent's exit is the signal); the child lets
# go of the command's output (it would hold the tool's pipe open) and relays until the sandbox ends.
FORWARDER = """
import asyncio, os, socket, sys
path, port = sys.argv[1], int(sys.argv[2])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(128)
if os.fork():
    os._exit(0)
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
async def copy(reader, writer):
    try:
        while data := await reader.read(262144):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        pass
async def serve(reader, writer):
    try:
        up_reader, up_writer = await asyncio.open_unix_connection(path)
    except OSError:
        writer.close()
        return
    try:
        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()
async def main():
    server = await asyncio.start_server(serve, sock=listener)
    await server.serve_forever()
asyncio.run(main())
"""


@dataclass(slots=True)
class ConnectionRecord:
    host: str
    port: int
    allowed: bool
    reason: str = ""  # why it was refused or cut short
    bytes_sent: int = 0
    bytes_received: int = 0


@dataclass(slots=True)
class NetworkUsage:
    """One call's network use, in the order the connections came."""

    connections: list[ConnectionRecord] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(record.bytes_sent + record.bytes_received for record in self.connections)

    def summary(self) -> str:
        """A line for the tool's output, and one per refused or cut connection; empty when unused."""
        if not self.connections:
            return ""
        allowed = [record for record in self.connections if record.allowed]
        lines = [f"[network: {len(allowed)} connection(s) through the proxy, {self.total_bytes} bytes]"]
        noted = [record for record in self.connections if record.reason]
        for record in noted[:_MAX_NOTED]:
            what = "refused" if not record.allowed else "cut"
            lines.append(f"[network: {what} {authority(record.host, record.port)}: {record.reason}]")
        if len(noted) > _MAX_NOTED:
            lines.append(f"[network: {len(noted) - _MAX_NOTED} more refused or cut]")
        return "\n".join(lines)


class NetworkAccess(Protocol):
    """What the run's surroundings add to bash's network (issue #47), given to the tools by the
    composition root: the lists of the run's agent and the hosts granted to its thread, the grants
    themselves, and where each command's network use is recorded."""

    async def policy(self, base: EgressPolicy) -> EgressPolicy:
        """``base`` (the operator's settings) with the agent's lists and the thread's grants."""
        ...

    async def grant(self, pattern: HostPattern) -> None:
        """Lets the thread's bash reach ``pattern`` from now on (request_network_access approved)."""
        ...

    async def record(self, tool_call_id: str, usage: NetworkUsage) -> None:
        """Keeps what one command did on the network, for the run's page and /metrics."""
        ...


class _Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class EgressProxy:
    """The proxy of one bash call. ``async with EgressProxy(policy) as proxy``: ``proxy.socket_path``
    is the socket to bind into the sandbox; leaving closes every connection and removes the socket's
    private directory."""

    def __init__(self, policy: EgressPolicy, *, lifetime: bool = False) -> None:
        """``lifetime``: the proxy of a process that lives for hours (a stdio MCP server, issue #46),
        not of one command: a connection's record is dropped when it ends, so the bounds count the
        connections open at once and what they move, and nothing piles up."""
        self.policy = policy
        self.lifetime = lifetime
        self.usage = NetworkUsage()
        self._directory = ""
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def socket_path(self) -> str:
        return os.path.join(self._directory, "proxy.sock")

    async def __aenter__(self) -> EgressProxy:
        self._directory = tempfile.mkdtemp(prefix="threadline-egress-")  # 0700: the server's own
        self._server = await asyncio.start_unix_server(self._serve, path=self.socket_path)
        # The sandbox user connects through the bind mount; the directory keeps everyone else out.
        os.chmod(self.socket_path, 0o666)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        shutil.rmtree(self._directory, ignore_errors=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        idle = self.policy.bounds.idle_timeout_seconds
        socks = False
        try:
            first = await asyncio.wait_for(reader.readexactly(1), idle)
            if first == SOCKS5:
                socks = True
                destination = await asyncio.wait_for(socks_destination(reader, writer), idle)
                if destination is None:
                    return
                host, port = destination
                forwarded: bytes | None = None
            else:
                head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), idle)
                parsed = await http_destination(head, writer)
                if parsed is None:
                    return
                host, port, forwarded = parsed
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        record = ConnectionRecord(host, port, allowed=False)
        self.usage.connections.append(record)
        try:
            await self._connect(record, socks, forwarded, reader, writer)
        finally:
            if self.lifetime:
                self.usage.connections.remove(record)

    async def _connect(
        self,
        record: ConnectionRecord,
        socks: bool,
        forwarded: bytes | None,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        host, port = record.host, record.port
        try:
            upstream_reader, upstream_writer = await self._open(host, port)
        except _Refused as exc:
            record.reason = exc.reason
            if socks:
                writer.write(socks_reply(SOCKS_NOT_ALLOWED if exc.status == 403 else SOCKS_UNREACHABLE))
            else:
                refused = f"Threadline's network proxy refused {authority(host, port)}: {exc.reason}"
                await answer_http(writer, exc.status, refused)
            return
        record.allowed = True
        try:
            if socks:
                writer.write(socks_reply(SOCKS_SUCCEEDED))
                await writer.drain()
            elif forwarded is None:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:
                forwarded = with_headers(forwarded, self.policy.headers_for(host, port))
                upstream_writer.write(forwarded)
                record.bytes_sent += len(forwarded)
            await self._relay(record, reader, writer, upstream_reader, upstream_writer)
        finally:
            upstream_writer.close()

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        policy, bounds = self.policy, self.policy.bounds
        refusal = policy.refusal(host, port)
        if refusal is not None and policy.denied_by(host, port) is not None:
            raise _Refused(403, f"{refusal}; no approval can let it through")
        if refusal is not None:
            raise _Refused(403, f"{refusal}; {_HOW_TO_ASK}")
        if sum(record.allowed for record in self.usage.connections) >= bounds.max_connections:
            raise _Refused(
                403,
                f"this command has used its {bounds.max_connections} connections (AGENT_BASH_NETWORK_MAX_CONNECTIONS)",
            )
        if self.usage.total_bytes >= bounds.max_bytes:
            raise _Refused(403, f"this command has moved its {bounds.max_bytes} bytes (AGENT_BASH_NETWORK_MAX_BYTES)")
        try:
            addresses = await resolve_public(
                host,
                port,
                policy.allowed_private_hosts,
                refused_by="bash's network proxy",
                setting="AGENT_BASH_ALLOWED_PRIVATE_HOSTS",
            )
        except HostRefused as exc:
            raise _Refused(403, str(exc)) from exc
        failure = ""
        for address in addresses:  # only the addresses that were checked, never the name again
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(address, port, limit=_CHUNK), bounds.connect_timeout_seconds
                )
            except TimeoutError:
                failure = f"no answer from {address} within {bounds.connect_timeout_seconds:g} s"
            except OSError as exc:
                failure = f"{address}: {exc.strerror or exc}"
        raise _Refused(502, f"could not connect ({failure})")

    async def _relay(
        self,
        record: ConnectionRecord,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        loop = asyncio.get_running_loop()
        # When a byte last moved either way: a download is idle one way (the client sends nothing
        # after its request) and must not be cut for that.
        moved = [loop.time()]

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter, outbound: bool) -> None:
            bounds = self.policy.bounds
            while True:
                try:
                    left = moved[0] + bounds.idle_timeout_seconds - loop.time()
                    data = await asyncio.wait_for(source.read(_CHUNK), max(left, 0.001))
                except TimeoutError:
                    if loop.time() - moved[0] < bounds.idle_timeout_seconds:
                        continue  # the other way moved meanwhile
                    record.reason = record.reason or (
                        f"idle for {bounds.idle_timeout_seconds:g} s (AGENT_BASH_NETWORK_IDLE_TIMEOUT_SECONDS)"
                    )
                    raise
                moved[0] = loop.time()
                if not data:
                    if sink.can_write_eof():
                        sink.write_eof()
                    return
                if outbound:
                    record.bytes_sent += len(data)
                else:
                    record.bytes_received += len(data)
                if self.usage.total_bytes > bounds.max_bytes:
                    record.reason = f"this command reached its {bounds.max_bytes} bytes (AGENT_BASH_NETWORK_MAX_BYTES)"
                    raise ConnectionAbortedError(record.reason)
                sink.write(data)
                await sink.drain()

        tasks = [
            asyncio.create_task(copy(reader, upstream_writer, True)),
            asyncio.create_task(copy(upstream_reader, writer, False)),
        ]
        try:
            # Both directions end on their own (each passes its EOF on); a failure of either ends both.
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            if any(not task.cancelled() and task.exception() is not None for task in done):
                return
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
