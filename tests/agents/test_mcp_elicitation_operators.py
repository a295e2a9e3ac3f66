"""An MCP server's question (elicitation, issue #46) answered by an operator: through the REST API
and on its page in the admin, where open questions are listed beside approvals. The answer is
checked against the server's schema the same way as in the chat; the run goes on (the sweep takes
it) and the server gets the answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from rest_framework.authtoken.models import Token

from tests.helpers import eventually
from tests.mcp_world import elicit_stdio, elicitation_asked, mcp_servers
from threads.models import Approval, Run

QUEUE = "/admin/threads/approval/"


def _told(server: Any, fake_api: Any, thread_id: str) -> str:
    eventually(
        lambda: Run.objects.filter(
            thread__agui_thread_id=thread_id, agui_run_id__endswith="-continued", finished_at__isnull=False
        ).exists(),
        what="the run that went on from the answer to end",
    )
    server.drain()
    told = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_b"
    return str(told["content"])


def _api(server: Any, pending: str, body: dict[str, Any]) -> httpx.Response:
    staff = User.objects.get_or_create(username="ops", defaults={"is_staff": True})[0]
    staff.user_permissions.add(Permission.objects.get(codename="change_approval"))
    token = Token.objects.get_or_create(user=staff)[0].key
    return httpx.post(
        f"{server.url}/api/approvals/{pending}/answer",
        headers={"Authorization": f"Token {token}"},
        json=body,
        timeout=10,
    )


def test_a_question_answered_through_the_rest_api_reaches_the_server(server, fake_api, tmp_path: Path) -> None:
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        pending = elicitation_asked(server, fake_api, "t-elicit-api")["id"]
        shown = httpx.get(
            f"{server.url}/api/approvals/{pending}/",
            headers={"Authorization": f"Token {Token.objects.get_or_create(user=_staff())[0].key}"},
        ).json()
        assert shown["elicitation"]["server"] == "shop" and shown["elicitation"]["schema"]["required"] == ["seats"]
        answered = _api(server, pending, {"action": "accept", "content": {"seats": 4, "name": "Bo"}})
        assert answered.status_code == 200, answered.text
        assert _told(server, fake_api, "t-elicit-api") == 'book done with {"name": "Bo", "seats": 4}'


def _staff() -> User:
    staff = User.objects.get_or_create(username="ops", defaults={"is_staff": True})[0]
    staff.user_permissions.add(Permission.objects.get(codename="change_approval"))
    return staff


def test_content_not_matching_through_the_rest_api_is_a_400_naming_the_field(server, fake_api, tmp_path) -> None:
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        pending = elicitation_asked(server, fake_api, "t-elicit-api-bad")["id"]
        refused = _api(server, pending, {"action": "accept", "content": {"seats": 12}})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["field"] == "content.seats"
        assert _api(server, pending, {"action": "perhaps"}).json()["error"]["field"] == "action"
    assert Approval.objects.get(pk=pending).decision == Approval.Decision.PENDING


def test_the_admin_lists_open_questions_beside_approvals_and_answers_them(
    server, fake_api, tmp_path: Path, client
) -> None:
    client.force_login(User.objects.create_superuser("op", "op@example.com", "a-long-password"))
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        pending = elicitation_asked(server, fake_api, "t-elicit-admin")["id"]
        queue = client.get(QUEUE).content.decode()
        assert "MCP question (shop)" in queue and "How many seats, and for whom?" in queue
        assert "Fields: name, seats" in queue
        only = client.get(QUEUE, {"asked": "mcp"}).content.decode()
        (approval,) = Approval.objects.filter(elicitation__isnull=True).values_list("pk", flat=True)
        assert f"{QUEUE}{quote(pending)}/change/" in only and f"{QUEUE}{quote(approval)}/change/" not in only
        assert f"{QUEUE}{quote(approval)}/change/" in queue
        page = f"{QUEUE}{quote(pending)}/change/"
        refused = client.post(page, {"answer_action": "accept", "answer_content": '{"seats": "many"}'})
        assert refused.status_code == 200 and "content.seats" in refused.content.decode()
        assert Approval.objects.get(pk=pending).decision == Approval.Decision.PENDING
        saved = client.post(page, {"answer_action": "accept", "answer_content": '{"seats": 1}'})
        assert saved.status_code == 302, saved.content.decode()[-2000:]
        assert _told(server, fake_api, "t-elicit-admin") == 'book done with {"seats": 1}'
    assert Approval.objects.get(pk=pending).answered_by == "op"
