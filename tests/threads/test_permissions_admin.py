"""The operator's permission rules in the admin: edited in order, and a tool call tried against them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from agents.models import Agent, PermissionRule
from agents.permissions import rules_for

CHANGELIST = "/admin/agents/permissionrule/"
TRY = "/admin/agents/permissionrule/try/"


@pytest.fixture
def agent(db: None) -> Agent:
    return Agent.objects.create(name="coder-admin")


def rule(position: int, decision: str, tool: str = "", match: str = "", **fields: Any) -> PermissionRule:
    made = PermissionRule(position=position, decision=decision, tool=tool, match=match, **fields)
    made.full_clean()
    made.save()
    return made


def try_call(client: Client, tool: str, arguments: Any, **fields: str) -> str:
    query = {"agent": "coder-admin", "tool": tool, "arguments": json.dumps(arguments), **fields}
    response = client.get(TRY, query)
    assert response.status_code == 200
    return response.content.decode()


def test_the_rules_list_shows_the_rules_in_evaluation_order(operator, agent):
    later = rule(20, "deny", "bash", "rm *", description="never delete")
    sooner = rule(10, "allow", "file_edit", "src/**", scope="agent", agent=agent)
    page = operator.get(CHANGELIST).content.decode()
    assert page.index(f">#{sooner.pk}<") < page.index(f">#{later.pk}<")
    assert "coder-admin" in page
    assert "never delete" in page
    assert f'href="{TRY}"' in page


def test_the_list_edits_position_decision_and_enabled_in_place(operator):
    first = rule(10, "deny", "bash", "rm *")
    second = rule(20, "allow", "bash", "*")
    response = operator.post(
        CHANGELIST,
        {
            "form-TOTAL_FORMS": "2",
            "form-INITIAL_FORMS": "2",
            "form-MIN_NUM_FORMS": "0",
            "form-MAX_NUM_FORMS": "1000",
            "form-0-id": str(first.pk),
            "form-0-position": "30",
            "form-0-decision": "ask",
            "form-0-enabled": "on",
            "form-1-id": str(second.pk),
            "form-1-position": "20",
            "form-1-decision": "allow",
            "_save": "Save",
        },
    )
    assert response.status_code == 302
    assert [(r.pk, r.position, r.decision, r.enabled) for r in PermissionRule.objects.all()] == [
        (second.pk, 20, "allow", False),
        (first.pk, 30, "ask", True),
    ]
    assert rules_for("coder-admin", "") == [PermissionRule.objects.get(pk=first.pk)]


def test_the_add_form_refuses_a_glob_that_does_not_compile(operator):
    data = {"position": "10", "tool": "bash", "match": "{1..100000}", "decision": "deny", "scope": "global"}
    response = operator.post(f"{CHANGELIST}add/", data)
    assert response.status_code == 200
    assert "The glob does not compile" in response.content.decode()
    assert not PermissionRule.objects.exists()
    response = operator.post(f"{CHANGELIST}add/", {**data, "match": "rm *", "enabled": "on"})
    assert response.status_code == 302
    assert PermissionRule.objects.get().match == "rm *"


def test_the_add_form_refuses_an_agent_scope_without_an_agent(operator):
    data = {"position": "10", "tool": "", "match": "", "decision": "deny", "scope": "agent"}
    response = operator.post(f"{CHANGELIST}add/", data)
    assert "A rule scoped to one agent needs that agent." in response.content.decode()
    assert not PermissionRule.objects.exists()


def test_a_new_rule_is_offered_the_position_after_the_last(operator):
    rule(40, "deny", "bash")
    assert 'name="position" value="50"' in operator.get(f"{CHANGELIST}add/").content.decode()


def test_the_try_page_shows_the_rule_that_decides(operator, agent):
    rule(10, "allow", "bash", "git *")
    deny = rule(20, "deny", "bash", "rm *", scope="agent", agent=agent)
    rule(30, "ask", "bash")
    page = try_call(operator, "bash", {"command": "cd build && rm -rf ."})
    assert "Verdict: deny" in page
    assert f"rule #{deny.pk} (agent coder-admin): deny bash `rm *`" in page
    assert f'href="{CHANGELIST}{deny.pk}/change/">#{deny.pk}</a>' in page
    assert "<code>cd build &amp;&amp; rm -rf .</code>, <code>cd build</code>, <code>rm -rf .</code>" in page
    assert "<strong>decided</strong>" in page


def test_the_try_page_shows_an_ask_rule_overriding_a_yes_always(operator, agent):
    gate = rule(10, "ask", "bash", "git push*", scope="thread", thread_agui_id="t-9")
    page = try_call(operator, "bash", {"command": "git push"}, thread="t-9", remembered="on")
    assert "Verdict: ask" in page
    assert f"rule #{gate.pk} (thread t-9): ask bash `git push*`; an ask rule asks whatever a yes-always" in page
    assert "<code>bash:git push*</code>" in page


def test_the_try_page_falls_back_to_the_tools_class(operator, agent):
    rule(10, "deny", "bash", "rm *", scope="thread", thread_agui_id="another-thread")
    page = try_call(operator, "file_write", {"path": "./src/app.py"}, auto_approve="on")
    assert "Verdict: allow" in page
    assert "no rule matched; file_write is not read-only, but auto-approve is on" in page
    assert "none: the tool's own class decided" in page
    assert "<code>src/app.py</code>" in page
    assert "No enabled rule applies to this agent and thread." in page


def test_the_try_page_refuses_arguments_that_are_not_a_json_object(operator, agent):
    page = operator.get(TRY, {"agent": "coder-admin", "tool": "bash", "arguments": "[1, 2]"}).content.decode()
    assert "The arguments are a JSON object" in page
    assert "Verdict" not in page
    page = operator.get(TRY, {"agent": "coder-admin", "tool": "bash", "arguments": "{nope"}).content.decode()
    assert "Enter a valid JSON." in page


def test_the_try_page_starts_with_an_empty_form(operator):
    page = operator.get(TRY).content.decode()
    assert "Try a tool call" in page
    assert "Verdict" not in page


def test_someone_who_is_not_staff_is_sent_to_the_login_page(client, db):
    client.force_login(User.objects.create_user("visitor"))
    for url in (TRY, CHANGELIST):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_staff_without_the_view_permission_cannot_try_calls(client, db):
    staff = User.objects.create_user("staff", is_staff=True)
    client.force_login(staff)
    assert client.get(TRY).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_permissionrule"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert client.get(TRY).status_code == 200
