"""An MCP server's errors never show its secrets (issue #49 item 2): its last error, the log and the
run's events carry its env and header values redacted, and in the admin only superusers see a
server's errors at all. The servers are real subprocesses (tests/fakes/mcp_server.py) that print
their token to stderr, or into a tool's error."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from agents.mcp.config import parse_servers
from agents.mcp.pool import mcp_pool
from agents.mcp.redaction import REDACTED, redact, secret_values
from agents.services import mcp_server_create
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually
from tests.mcp_world import fake_stdio, mcp_operator, mcp_servers

AUTH = {"Authorization": "Bearer test-token"}
LIST = "/admin/agents/mcpserverentry/"
FILED_SECRET = "filed-token-2718281828"  # reaches the server through ${LEAKY_TOKEN}
ADMIN_SECRET = "admin-token-1414213562"
SLOW = {"MCP_RESTART_BACKOFF_SECONDS": 30.0}


@pytest.fixture
def superuser(transactional_db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "a-long-password"))
    return client


@pytest.fixture
def staff_viewer(transactional_db: None) -> Client:
    viewer = User.objects.create_user("viewer", password="a-long-password", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_mcpserverentry"))
    viewer.user_permissions.add(Permission.objects.get(codename="change_mcpserverentry"))
    client = Client()
    client.force_login(viewer)
    return client


async def _errors() -> dict[str, str]:
    return {name: server.last_error for name, server in mcp_pool().servers.items()}


def _leaky_servers(server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("LEAKY_TOKEN", FILED_SECRET)
    filed = fake_stdio("--leak-at-start", "TOKEN", env={"TOKEN": "${LEAKY_TOKEN}"})
    return mcp_servers(server, tmp_path, {"filed": filed}, **SLOW)


def _both_down_and_told(server: Any) -> dict[str, str]:
    httpx.get(f"{server.url}/agui/info", headers=AUTH)  # the pool is brought in line

    def told() -> dict[str, str] | None:
        errors: dict[str, str] = server.call(_errors())
        return errors if all("login failed" in errors.get(name, "") for name in ("filed", "desk")) else None

    found: dict[str, str] = eventually(told, what="both servers failing to start")
    return found


def _admin_desk() -> int:
    args = fake_stdio("--leak-at-start", "TOKEN")["args"]
    desk = mcp_server_create(
        by=mcp_operator(),
        name="desk",
        transport="stdio",
        command=fake_stdio()["command"],
        args=args,
        cwd=fake_stdio()["cwd"],
        paths=fake_stdio()["paths"],
        env={"TOKEN": ADMIN_SECRET},
    )
    return desk.pk


@pytest.mark.clients
def test_a_superuser_sees_a_servers_error_with_its_secrets_redacted(
    server, superuser: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agents.mcp")
    with _leaky_servers(server, tmp_path, monkeypatch):
        desk = _admin_desk()
        errors = _both_down_and_told(server)
        listed = superuser.get(LIST).content.decode()
        changed = superuser.get(f"{LIST}{desk}/change/").content.decode()
    assert errors["filed"].count(REDACTED) and errors["desk"].count(REDACTED), errors
    assert f"TOKEN={REDACTED}" in errors["filed"] and f"TOKEN={REDACTED}" in errors["desk"]
    for page in (listed, changed):
        assert FILED_SECRET not in page and ADMIN_SECRET not in page
    assert "last error" in listed and f"TOKEN={REDACTED}" in listed and f"TOKEN={REDACTED}" in changed
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "MCP server 'filed' is down" in logged and "MCP server 'desk' is down" in logged
    assert FILED_SECRET not in logged and ADMIN_SECRET not in logged


@pytest.mark.clients
def test_a_staff_user_who_is_not_a_superuser_sees_no_server_errors(
    server, staff_viewer: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _leaky_servers(server, tmp_path, monkeypatch):
        desk = _admin_desk()
        _both_down_and_told(server)
        listed = staff_viewer.get(LIST)
        changed = staff_viewer.get(f"{LIST}{desk}/change/")
    assert listed.status_code == 200 and changed.status_code == 200
    for page in (listed.content.decode(), changed.content.decode()):
        assert "login failed" not in page and REDACTED not in page and "last error" not in page.lower()
        assert FILED_SECRET not in page and ADMIN_SECRET not in page
    assert 'data-name="filed"' in listed.content.decode()  # the server is listed, without its error


@pytest.mark.clients
def test_a_tools_error_and_refusal_reach_the_run_redacted(server, fake_api, tmp_path: Path) -> None:
    leaky = fake_stdio("--leaky", env={"TOKEN": ADMIN_SECRET})
    with mcp_servers(server, tmp_path, {"leaky": leaky}):
        fake_api.script(
            [
                tool_turn("mcp__leaky__leak", {}, id="toolu_l"),
                tool_turn("mcp__leaky__refuse", {}, id="toolu_r"),
                text_turn(["ok"]),
            ]
        )
        (result,) = run_client(
            "1",
            f"{server.url}/agui/coder",
            server.token,
            [{"threadId": "t-leaky", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}],
        )
    assert result["error"] is None, result["error"]
    shown = [e["content"] for e in result["received"] if e["type"] == "TOOL_CALL_RESULT"]
    assert shown == [
        f"login refused for token {REDACTED}",
        f"MCP server 'leaky' refused the call: bad token {REDACTED}",
    ]
    told_the_model = [request.body for request in fake_api.requests[1:]]
    assert ADMIN_SECRET not in repr(told_the_model) and ADMIN_SECRET not in repr(result["received"])


def test_a_header_value_and_its_token_are_redacted() -> None:
    (config,) = parse_servers(
        {
            "mcpServers": {
                "docs": {"url": "https://docs.example/mcp", "headers": {"Authorization": "Bearer ${DOCS_KEY}"}}
            }
        },
        source="test",
        environ={"DOCS_KEY": "docs-key-5772156649"},
    )
    secrets = secret_values(config, environ={"DOCS_KEY": "docs-key-5772156649"})
    said = redact("401 for 'Bearer docs-key-5772156649'; key docs-key-5772156649 refused", secrets)
    assert said == f"401 for '{REDACTED}'; key {REDACTED} refused"
