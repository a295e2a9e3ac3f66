"""The MCP configuration is not read from the database for every run and every /agui/info: it is
kept for a moment, read again at once after this process's admin edits, and in the background past
the TTL after another process's (issue #27 item 5: the read waited on the database thread behind the
event logs)."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async

from agents.mcp.pool import CONFIGURED_SERVERS
from agents.models import McpServerEntry
from agents.services import mcp_server_create
from tests.mcp_world import fake_stdio, mcp_operator


async def _enabled_by_name() -> dict[str, bool]:
    return {config.name: config.enabled for config in await CONFIGURED_SERVERS.get()}


@pytest.mark.django_db(transaction=True)
async def test_an_edit_here_is_read_at_once_and_one_elsewhere_after_the_ttl(monkeypatch, settings) -> None:
    settings.MCP_SERVERS = ""
    monkeypatch.setattr(CONFIGURED_SERVERS, "ttl", 1.0)
    CONFIGURED_SERVERS.forget()
    assert await _enabled_by_name() == {}
    fake = fake_stdio()
    desk = await sync_to_async(mcp_server_create)(
        by=await sync_to_async(mcp_operator)(),
        name="desk",
        transport="stdio",
        command=fake["command"],
        args=fake["args"],
        cwd=fake["cwd"],
        paths=fake["paths"],
    )
    assert await _enabled_by_name() == {"desk": True}  # this process's edit: its signal makes it read again
    read_at = time.monotonic()
    # Another process's edit reaches this one without a signal: the list as read holds until the TTL,
    await McpServerEntry.objects.filter(pk=desk.pk).aupdate(enabled=False)
    assert await _enabled_by_name() == {"desk": True}
    await asyncio.sleep(max(0.0, 1.05 - (time.monotonic() - read_at)))
    # then is answered once more as it was, while it is read again for the next request.
    assert await _enabled_by_name() == {"desk": True}
    for _ in range(200):
        await asyncio.sleep(0.01)
        if await _enabled_by_name() == {"desk": False}:
            break
    assert await _enabled_by_name() == {"desk": False}
    # A list older than twice the TTL (no request came meanwhile) is not answered: it is read first.
    await McpServerEntry.objects.filter(pk=desk.pk).aupdate(enabled=True)
    await asyncio.sleep(2.05)
    assert await _enabled_by_name() == {"desk": True}
