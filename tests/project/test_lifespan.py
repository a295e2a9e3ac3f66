"""What the server's lifespan (project/asgi.py) keeps running besides the requests."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.db import connection

from agents.models import Agent


async def _lifespan(during: Any) -> None:
    """Runs the application's lifespan: startup, ``during()``, shutdown."""
    from project.asgi import application

    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    life = asyncio.create_task(application({"type": "lifespan"}, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    while "lifespan.startup.complete" not in sent:
        assert not life.done(), life.exception()
        await asyncio.sleep(0.01)
    try:
        await during()
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(life, 30)
    assert sent[-1] == "lifespan.shutdown.complete"


def _disable_coder() -> None:
    """What another process's admin does, seen from here: a row changed, no signal sent."""
    try:
        Agent.objects.filter(name="coder").update(enabled=False)
    finally:
        connection.close()


def test_the_enabled_agents_are_read_again_with_no_request_asking(coder):
    """Another process's admin disables an agent (no signal reaches this one): this process finds
    out within its re-read, with no request coming, so the next request does not wait for a read."""
    from agents.mcp.pool import CONFIGURED_SERVERS
    from agui.views import ENABLED_AGENTS

    async def during() -> None:
        deadline = time.monotonic() + 10
        while ENABLED_AGENTS.as_last_read is None or "coder" not in ENABLED_AGENTS.as_last_read:
            assert time.monotonic() < deadline, "the agents were never read"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(_disable_coder)
        while "coder" in (ENABLED_AGENTS.as_last_read or ()):
            assert time.monotonic() < deadline, "the change was not read again without a request"
            await asyncio.sleep(0.05)

    try:
        asyncio.run(_lifespan(during))
    finally:
        # What the keepers read belongs to this test's database.
        ENABLED_AGENTS.forget()
        CONFIGURED_SERVERS.forget()
