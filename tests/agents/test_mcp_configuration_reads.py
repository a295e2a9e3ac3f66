"""The MCP configuration is not read from the database for every run and every /agui/info: it is
kept for a moment, read again at once after this process's admin edits, and within the TTL after
another process's (issue #27 item 5: the read waited on the database thread behind the event logs)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.mcp.pool import CONFIGURED_SERVERS
from agents.models import McpServerEntry
from agents.services import mcp_server_create
from tests.mcp_world import fake_stdio


def _enabled_by_name() -> dict[str, bool]:
    async def read() -> dict[str, bool]:
        return {config.name: config.enabled for config in await CONFIGURED_SERVERS.get()}

    return asyncio.run(read())


@pytest.mark.django_db(transaction=True)
def test_an_edit_here_is_read_at_once_and_one_elsewhere_within_the_ttl(monkeypatch, settings) -> None:
    settings.MCP_SERVERS = ""
    monkeypatch.setattr(CONFIGURED_SERVERS, "ttl", 1.0)
    CONFIGURED_SERVERS.forget()
    assert _enabled_by_name() == {}
    fake = fake_stdio()
    desk = mcp_server_create(name="desk", transport="stdio", command=fake["command"], args=fake["args"])
    assert _enabled_by_name() == {"desk": True}  # this process's edit: its signal makes it read again
    # Another process's edit reaches this one without a signal: the list as read holds until the TTL.
    McpServerEntry.objects.filter(pk=desk.pk).update(enabled=False)
    read_at = time.monotonic()
    assert _enabled_by_name() == {"desk": True}
    time.sleep(max(0.0, 1.05 - (time.monotonic() - read_at)))
    assert _enabled_by_name() == {"desk": False}
    McpServerEntry.objects.filter(pk=desk.pk).delete()
    assert _enabled_by_name() == {}
