"""agui/views.py's EnabledAgents: the path to a run's first byte reads the agents rarely."""

from __future__ import annotations

import asyncio
from typing import Any

from django.db import connection

from agents.models import Agent
from agui.views import EnabledAgents
from threads.dbthread import on_db_thread


class AgentReads:
    """Counts the reads of the agents table on the database thread's connection."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if '"agents_agent"' in sql:
            self.count += 1
        return execute(sql, params, many, context)

    async def __aenter__(self) -> AgentReads:
        await on_db_thread(lambda: connection.execute_wrappers.append(self))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await on_db_thread(lambda: connection.execute_wrappers.remove(self))


async def test_a_burst_of_requests_that_find_the_set_stale_reads_it_once(coder):
    agents = EnabledAgents()
    async with AgentReads() as reads:
        found = await asyncio.gather(*(agents.exists("coder") for _ in range(50)))
        listed = await asyncio.gather(*(agents.all() for _ in range(50)))
    assert found == [True] * 50
    assert [[agent.name for agent in each] for each in listed] == [["coder"]] * 50
    assert reads.count == 1


async def test_a_change_is_read_again_and_a_new_name_at_once(coder):
    agents = EnabledAgents(ttl=3600)
    assert await agents.exists("coder")
    await Agent.objects.acreate(name="reviewer", system_prompt="You review.")
    assert await agents.exists("reviewer")  # not in the set: looked up at once
    coder.enabled = False
    await coder.asave()
    agents.forget()  # what saving an agent in this process does
    assert not await agents.exists("coder")
    assert [agent.name for agent in await agents.all()] == ["reviewer"]


async def test_a_read_begun_before_a_change_does_not_pass_for_fresh_after_it(coder):
    agents = EnabledAgents(ttl=3600)
    async with AgentReads() as reads:
        before = asyncio.ensure_future(agents.exists("coder"))
        await asyncio.sleep(0)  # its read is on its way
        agents.forget()  # an agent saved meanwhile
        assert await before
        assert await agents.exists("coder")
    assert reads.count == 2  # the second call read again: the first read's answer was not kept
