"""What the server's lifespan (project/asgi.py) keeps running besides the requests. The lifespan
starts and stops the process's run host, so it runs in a process of its own (tests/procs.py
script_report), not in the suite's."""

from __future__ import annotations

from tests.asgi_scripts import _env
from tests.procs import script_report

# Starts the lifespan, lets another "process" disable the agent (a row changed, no signal sent),
# and reports whether this process's set of enabled agents lost it with no request asking.
KEPT_FRESH_SCRIPT = """
import asyncio, json, time

from project.asgi import application  # sets Django up

from django.db import connection

from agents.models import Agent
from agui.views import ENABLED_AGENTS

def disable_coder():
    try:
        Agent.objects.filter(name="coder").update(enabled=False)
    finally:
        connection.close()

async def main():
    await asyncio.to_thread(lambda: (Agent.objects.get_or_create(name="coder"), connection.close()))
    inbox, sent = asyncio.Queue(), []
    async def send(message):
        sent.append(message["type"])
    life = asyncio.create_task(application({"type": "lifespan"}, inbox.get, send))
    await inbox.put({"type": "lifespan.startup"})
    while "lifespan.startup.complete" not in sent:
        await asyncio.sleep(0.01)
    report = {"read": False, "dropped": False}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "coder" not in (ENABLED_AGENTS.as_last_read or ()):
        await asyncio.sleep(0.05)
    report["read"] = "coder" in (ENABLED_AGENTS.as_last_read or ())
    await asyncio.to_thread(disable_coder)
    while time.monotonic() < deadline and "coder" in (ENABLED_AGENTS.as_last_read or ()):
        await asyncio.sleep(0.05)
    report["dropped"] = "coder" not in (ENABLED_AGENTS.as_last_read or ())
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(life, 30)
    report["shut down"] = sent[-1] == "lifespan.shutdown.complete"
    print(json.dumps(report))

asyncio.run(main())
"""


def test_the_enabled_agents_are_read_again_with_no_request_asking(tmp_path):
    """Another process's admin disables an agent (no signal reaches this one): this process finds
    out within its re-read, with no request coming, so the next request does not wait for a read."""
    report = script_report(KEPT_FRESH_SCRIPT, _env(tmp_path))
    assert report == {"read": True, "dropped": True, "shut down": True}
