"""Every REST list costs the same few queries whether it holds two rows or forty (no N+1)."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import PermissionRule
from tests import api_world as world

_serial = itertools.count()


def _name(prefix):
    return f"{prefix}-{next(_serial)}"


class World:
    """Rows under the owner's thread "t-main", grown the way each list would show them."""

    def __init__(self, people):
        self.people = people
        self.thread = world.thread("t-main", owner=people.owner)
        self.run = world.run(self.thread)
        self.seq = 0

    def threads(self, n):
        for _ in range(n):
            agent = world.agent(_name("agent"))
            thread = world.thread(_name("t"), owner=self.people.owner, agent_name=agent.name)
            world.message(thread, 0, "hello")
            world.run(thread)

    def messages(self, n):
        start = self.thread.messages.count()
        for position in range(start, start + n):
            world.message(self.thread, position, "more")

    def runs(self, n):
        for _ in range(n):
            world.run(self.thread, _name("r"), parent=self.run)

    def events(self, n):
        run = world.run(self.thread, _name("r"))
        world.events(run, n)
        self.events_of = run

    def approvals(self, n):
        for _ in range(n):
            world.approval(world.run(world.thread(_name("t"), owner=self.people.owner)), _name("ap"))

    def subagent_tasks(self, n):
        for _ in range(n):
            run = world.run(world.thread(_name("t"), owner=self.people.owner))
            world.subagent_task(run, _name("sa"))

    def thread_subagent_tasks(self, n):
        for _ in range(n):
            parent = world.subagent_task(world.run(self.thread, _name("r")), _name("sa"))
            world.subagent_task(self.run, _name("sa"), parent_task=parent, depth=2)

    def rules(self, n):
        for position in range(n):
            agent = world.agent(_name("agent"))
            PermissionRule.objects.create(position=position, decision="ask", scope="agent", agent=agent)
            PermissionRule.objects.create(position=position, decision="allow", scope="thread", thread_agui_id="t-main")

    def agents(self, n):
        for _ in range(n):
            world.agent(_name("agent"))


LISTS = [
    ("threads/", "threads"),
    ("threads/t-main/", "messages"),
    ("threads/t-main/runs/", "runs"),
    ("threads/t-main/subagent-tasks/", "thread_subagent_tasks"),
    ("runs/{events_of}/events/", "events"),
    ("approvals/", "approvals"),
    ("subagent-tasks/", "subagent_tasks"),
    ("agents/", "agents"),
    ("permission-rules/", "rules"),
]


def _queries(person, path):
    with CaptureQueriesContext(connection) as queries:
        response = person.get(path) if path == "threads/t-main/" else person.get(path, page_size=100)
    assert response.status_code == 200, response.content
    return len(queries), response.json()


@pytest.mark.parametrize("who", ["owner", "staff"])
@pytest.mark.parametrize(("path", "grow"), LISTS)
def test_a_list_costs_the_same_queries_for_few_rows_and_many(db, path, grow, who):
    place = World(world.People.create())
    person = getattr(place.people, who)
    getattr(place, grow)(2)
    few, small = _queries(person, path.format(events_of=getattr(place, "events_of", None) and place.events_of.pk))
    getattr(place, grow)(40)
    many, large = _queries(person, path.format(events_of=getattr(place, "events_of", None) and place.events_of.pk))
    size = (lambda body: body["count"]) if "results" in small else (lambda body: len(body["messages"]))
    assert size(large) > size(small) + 30
    assert many == few, f"{path}: {few} queries for {size(small)} rows, {many} for {size(large)}"
    # The token, the count, the page, a prefetch or a parent row: never more.
    assert few <= 4


def test_the_thread_list_reads_no_state_document(db):
    """A thread's state can run to megabytes; a page of a hundred threads shows none of it."""
    place = World(world.People.create())
    place.threads(3)
    with CaptureQueriesContext(connection) as queries:
        response = place.people.staff.get("threads/", page_size=100)
    assert response.status_code == 200 and response.json()["count"] == 4
    rows = [query["sql"] for query in queries if '"threads_thread"."agui_thread_id"' in query["sql"]]
    assert len(rows) == 1
    for column in ('"threads_thread"."state"', '"agents_agent"."mcp_servers"', '"agents_agent"."system_prompt"'):
        assert column not in rows[0]
