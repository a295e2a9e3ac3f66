"""The proxy of a process that lives for hours (a stdio MCP server, issue #46) keeps no record of a
connection once it ends, so its bounds count the connections open at once and nothing piles up; a
bash call's proxy keeps each, for the command's output and the run's page."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.tools.egress import EgressPolicy
from orchestrator.tools.egressproxy import EgressProxy


async def _refused_request(proxy: EgressProxy) -> bytes:
    reader, writer = await asyncio.open_unix_connection(proxy.socket_path)
    writer.write(b"GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


@pytest.mark.parametrize("lifetime", [True, False])
async def test_a_lifetime_proxy_forgets_each_connection_as_it_ends(lifetime: bool) -> None:
    async with EgressProxy(EgressPolicy(mode="on"), lifetime=lifetime) as proxy:
        for _ in range(3):
            assert (await _refused_request(proxy)).startswith(b"HTTP/1.1 403")
        for _ in range(50):  # the handler's end runs just after the answer is read
            if len(proxy.usage.connections) == (0 if lifetime else 3):
                break
            await asyncio.sleep(0.02)
        assert len(proxy.usage.connections) == (0 if lifetime else 3)
