"""GET /api/agents/ and /api/permission-rules/: the configuration, read only, without secrets."""

from __future__ import annotations

import pytest
from django.test import override_settings

from agents.models import Agent, PermissionRule
from tests import api_world as world


@pytest.fixture
def people(db):
    return world.People.create()


def test_agents_are_listed_by_name_with_their_limits(people):
    world.agent("zeta")
    Agent.objects.filter(name="zeta").update(enabled=False, model="claude-zeta", grounding_mode="enforced")
    world.agent("alpha")
    body = people.stranger.get("agents/").json()
    assert [row["name"] for row in body["results"]] == ["alpha", "coder", "zeta"]
    zeta = body["results"][2]
    assert (zeta["enabled"], zeta["model"], zeta["groundingMode"]) == (False, "claude-zeta", "enforced")
    assert zeta["limits"] == {
        "maxIterations": 20,
        "maxRunSeconds": 1800,
        "tokenBudget": 0,
        "maxTokens": 4096,
        "thinkingBudget": 0,
    }


@override_settings(ANTHROPIC_MODEL="claude-default")
def test_an_agent_naming_no_model_shows_the_servers_default(people):
    assert people.owner.get("agents/alpha/").status_code == 404
    world.agent("alpha")
    assert people.owner.get("agents/alpha/").json()["model"] == "claude-default"


def test_an_agents_system_prompt_never_appears(people):
    world.agent("alpha")
    listed = people.staff.get("agents/").content.decode()
    detail = people.staff.get("agents/alpha/").content.decode()
    assert "secret prompt" not in listed and "secret prompt" not in detail
    assert "systemPrompt" not in listed and "system_prompt" not in detail


@pytest.fixture
def rules(people):
    reviewer = world.agent("reviewer")
    world.thread("t-olive", owner=people.owner)
    made = [
        PermissionRule.objects.create(position=30, decision="deny", tool="bash", match="rm *"),
        PermissionRule.objects.create(position=10, decision="allow", tool="file_read"),
        PermissionRule.objects.create(position=20, decision="ask", scope="agent", agent=reviewer, tool="bash"),
        PermissionRule.objects.create(position=10, decision="allow", scope="thread", thread_agui_id="t-olive"),
        PermissionRule.objects.create(position=5, decision="deny", scope="thread", thread_agui_id="t-someone-else"),
    ]
    return made


def _positions(response):
    assert response.status_code == 200, response.content
    return [(row["position"], row["scope"]) for row in response.json()["results"]]


def test_rules_come_in_the_order_they_are_tried(people, rules):
    assert _positions(people.staff.get("permission-rules/")) == [
        (5, "thread"),
        (10, "global"),
        (10, "thread"),
        (20, "agent"),
        (30, "global"),
    ]


def test_rules_filter_by_scope_and_agent(people, rules):
    assert _positions(people.staff.get("permission-rules/", scope="global")) == [(10, "global"), (30, "global")]
    by_agent = people.staff.get("permission-rules/", agent="reviewer").json()["results"]
    assert [(row["agent"], row["tool"], row["decision"]) for row in by_agent] == [("reviewer", "bash", "ask")]
    assert by_agent[0]["threadId"] is None


def test_a_scope_that_does_not_exist_is_a_400_naming_it(people, rules):
    response = people.staff.get("permission-rules/", scope="planet")
    assert response.status_code == 400 and response.json()["error"]["field"] == "scope"


def test_a_user_sees_thread_rules_of_their_own_threads_only(people, rules):
    assert _positions(people.owner.get("permission-rules/")) == [
        (10, "global"),
        (10, "thread"),
        (20, "agent"),
        (30, "global"),
    ]
    hidden = rules[4]
    assert people.owner.get(f"permission-rules/{hidden.pk}/").status_code == 404
    assert people.staff.get(f"permission-rules/{hidden.pk}/").json()["threadId"] == "t-someone-else"


def test_rules_are_paginated(people, rules):
    body = people.staff.get("permission-rules/", page_size=2, page=2).json()
    assert body["count"] == 5 and [row["position"] for row in body["results"]] == [10, 20]


def test_an_unknown_rule_is_a_404_whatever_the_size_of_its_id(people, rules):
    for rule_id in ["0", "999999", "9" * 30]:
        response = people.staff.get(f"permission-rules/{rule_id}/")
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
