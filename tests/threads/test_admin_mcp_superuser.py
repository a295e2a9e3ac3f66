"""Who may add an MCP server (issue #46, item 4): an entry is a command the server runs, so only a
superuser adds, changes or deletes one, in the admin or through the services; and ``${VAR}`` in an
entry made there names only the variables MCP_ENV_ALLOWLIST lists, where the file's entries read the
whole environment."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import PermissionDenied
from django.test import Client, override_settings

from agents.mcp.config import parse_servers
from agents.mcp.pool import configured_servers
from agents.models import McpServerEntry
from agents.services import mcp_server_create, mcp_server_delete, mcp_server_update
from tests.mcp_world import mcp_operator

LIST = "/admin/agents/mcpserverentry/"
ADD = f"{LIST}add/"
SUPERUSER_ONLY = "only a superuser may add, change or delete one"


@pytest.fixture
def operator(client: Client, transactional_db: None) -> Client:
    client.force_login(mcp_operator())
    return client


@pytest.fixture
def staff(transactional_db: None) -> User:
    """A staff user holding every permission on MCP servers, but not a superuser."""
    user = User.objects.create_user("staff", password="a-long-password", is_staff=True)
    codenames = [f"{verb}_mcpserverentry" for verb in ("add", "change", "delete", "view")]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def _form(**fields: str) -> dict[str, str]:
    empty = {"args": "[]", "env": "{}", "cwd": "", "url": "", "headers": "{}", "description": "", "paths": "[]"}
    return {"name": "desk", "transport": "stdio", "command": "desk-server", "enabled": "on", **empty, **fields}


def _desk() -> McpServerEntry:
    return mcp_server_create(by=mcp_operator(), name="desk", transport="stdio", command="desk-server")


def test_a_staff_user_without_superuser_cannot_add_change_or_delete_a_server(client: Client, staff: User) -> None:
    desk = _desk()
    client.force_login(staff)
    assert client.get(LIST).status_code == 200  # they may still look
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, _form(name="other", command="/bin/sh")).status_code == 403
    change = client.post(f"{LIST}{desk.pk}/change/", _form(command="/bin/sh"))
    assert change.status_code == 403
    assert client.post(f"{LIST}{desk.pk}/delete/", {"post": "yes"}).status_code == 403
    assert list(McpServerEntry.objects.values_list("name", "command")) == [("desk", "desk-server")]


def test_the_services_refuse_anyone_but_a_superuser(staff: User) -> None:
    desk = _desk()
    with pytest.raises(PermissionDenied, match="only a superuser"):
        mcp_server_create(by=staff, name="other", transport="stdio", command="/bin/sh")
    with pytest.raises(PermissionDenied):
        mcp_server_update(server=desk, by=staff, command="/bin/sh")
    with pytest.raises(PermissionDenied):
        mcp_server_delete(server=desk, by=staff)
    desk.refresh_from_db()
    assert desk.command == "desk-server" and McpServerEntry.objects.count() == 1


def test_the_form_says_only_a_superuser_may(operator: Client) -> None:
    assert SUPERUSER_ONLY in operator.get(ADD).content.decode()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"env": '{"KEY": "${DJANGO_SECRET_KEY}"}'}, "env"),
        ({"args": '["--key", "${DJANGO_SECRET_KEY:-none}"]'}, "args"),
        ({"command": "${DJANGO_SECRET_KEY}"}, "command"),
    ],
)
def test_a_reference_to_the_secret_key_is_refused_naming_it(
    operator: Client, monkeypatch: pytest.MonkeyPatch, fields: dict[str, str], field: str
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "the-servers-secret-key")
    with override_settings(MCP_ENV_ALLOWLIST=("TEAM_TOKEN",)):
        response = operator.post(ADD, _form(**fields))
    assert response.status_code == 200
    said = " ".join(response.context["adminform"].form.errors[field])
    assert "${DJANGO_SECRET_KEY} may not be used" in said and "MCP_ENV_ALLOWLIST" in said
    assert not McpServerEntry.objects.exists()


def test_only_a_listed_variable_is_expanded_in_an_admin_entry(
    operator: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAM_TOKEN", "team-token-1")
    monkeypatch.setenv("DEPLOY_KEY", "deploy-key-2")
    with override_settings(MCP_ENV_ALLOWLIST=("TEAM_TOKEN",)):
        refused = operator.post(ADD, _form(env='{"TOKEN": "${TEAM_TOKEN}", "KEY": "${DEPLOY_KEY}"}'))
        assert "${DEPLOY_KEY} may not be used" in " ".join(refused.context["adminform"].form.errors["env"])
        assert operator.post(ADD, _form(env='{"TOKEN": "${TEAM_TOKEN}"}')).status_code == 302
        config = McpServerEntry.objects.get(name="desk").as_config()
    assert config.expanded().env == {"TOKEN": "team-token-1"}


def test_a_stored_admin_entry_naming_an_unlisted_variable_is_not_started_where_the_files_expands(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "the-servers-secret-key")
    # Written before MCP_ENV_ALLOWLIST lost the name, or by hand: the pool still never expands it.
    McpServerEntry.objects.create(name="desk", command="desk-server", env={"KEY": "${DJANGO_SECRET_KEY}"})
    with override_settings(MCP_SERVERS="", MCP_ENV_ALLOWLIST=()):
        assert configured_servers() == []
        # The file is written by whoever runs the server: its entries expand from the whole environment.
        document = {"mcpServers": {"filed": {"command": "filed-server", "env": {"KEY": "${DJANGO_SECRET_KEY}"}}}}
        (filed,) = parse_servers(document, source="mcp.json")
    assert filed.expanded().env == {"KEY": "the-servers-secret-key"}
