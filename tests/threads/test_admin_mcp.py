"""The admin's MCP servers page: the admin's servers are edited with the .mcp.json file's checks (a
bad entry is a form error, not a 500); env and header values are never shown back; the file's
servers are listed read-only, each with its status, its tools and its last error from the pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings

from agents.models import McpServerEntry
from agents.services import mcp_server_create
from tests.mcp_world import fake_stdio, mcp_operator, mcp_servers

AUTH = {"Authorization": "Bearer test-token"}
LIST = "/admin/agents/mcpserverentry/"
ADD = "/admin/agents/mcpserverentry/add/"
ENV_SECRET = "env-secret-value-1"
HEADER_SECRET = "header-secret-value-2"


@pytest.fixture
def operator(client: Client, transactional_db: None) -> Client:
    client.force_login(User.objects.create_superuser("operator", "op@example.com", "a-long-password"))
    return client


def _form(**fields: Any) -> dict[str, Any]:
    return {
        "name": "desk",
        "transport": "stdio",
        "command": "desk-server",
        "args": "[]",
        "env": "{}",
        "cwd": "",
        "url": "",
        "headers": "{}",
        "enabled": "on",
        "description": "",
        **fields,
    }


def _with_secrets() -> McpServerEntry:
    return mcp_server_create(
        by=mcp_operator(),
        name="docs",
        transport="http",
        url="https://docs.example/mcp",
        env={"TOKEN": ENV_SECRET},
        headers={"Authorization": f"Bearer {HEADER_SECRET}"},
    )


@override_settings(MCP_ENV_ALLOWLIST=("HOME",))
def test_a_server_is_added_from_the_admin(operator) -> None:
    response = operator.post(ADD, _form(args='["--fast"]', env='{"TOKEN": "${HOME}"}'))
    assert response.status_code == 302
    desk = McpServerEntry.objects.get(name="desk")
    assert (desk.args, desk.env) == (["--fast"], {"TOKEN": "${HOME}"})


@pytest.mark.parametrize(
    ("fields", "field", "said"),
    [
        ({"args": '"--fast"'}, "args", '"args" must be a list of strings'),
        ({"env": '{"TOKEN": 1}'}, "env", '"env" must be an object of strings'),
        ({"env": '{"TOKEN": "${NOT_SET_ANYWHERE}"}'}, "env", "${NOT_SET_ANYWHERE} is not set"),
        ({"command": ""}, "command", 'needs either a "command" (stdio) or a "url" (http)'),
        ({"transport": "http", "command": "", "url": "ftp://x"}, "url", "must be an http:// or https:// URL"),
        ({"name": "a__b"}, "name", "may not hold '__'"),
    ],
)
@override_settings(MCP_ENV_ALLOWLIST=("NOT_SET_ANYWHERE",))
def test_a_bad_entry_is_a_form_error(operator, fields: dict[str, str], field: str, said: str) -> None:
    response = operator.post(ADD, _form(**fields))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert said in " ".join(errors[field]), errors
    assert not McpServerEntry.objects.exists()


def test_a_name_the_file_has_is_refused(operator, tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": {"desk": {"command": "x"}}}')
    with override_settings(MCP_SERVERS=str(path)):
        response = operator.post(ADD, _form())
    assert response.status_code == 200
    (error,) = response.context["adminform"].form.errors["name"]
    assert "The MCP_SERVERS file already has a server called 'desk'" in error


def test_the_admin_never_shows_an_env_or_header_value(operator) -> None:
    docs = _with_secrets()
    for url in (LIST, f"{LIST}{docs.pk}/change/", f"{LIST}{docs.pk}/history/", f"{LIST}{docs.pk}/delete/"):
        page = operator.get(url).content.decode()
        assert ENV_SECRET not in page and HEADER_SECRET not in page, url
    listed = operator.get(LIST).content.decode()
    assert "TOKEN" in listed and "Authorization" in listed


def test_a_value_left_blank_keeps_the_stored_one(operator) -> None:
    docs = _with_secrets()
    form = _form(
        name="docs",
        transport="http",
        command="",
        url="https://docs.example/mcp",
        env='{"TOKEN": ""}',
        headers='{"Authorization": "", "X-Team": "blue"}',
    )
    assert operator.post(f"{LIST}{docs.pk}/change/", form).status_code == 302
    docs.refresh_from_db()
    assert docs.env == {"TOKEN": ENV_SECRET}
    assert docs.headers == {"Authorization": f"Bearer {HEADER_SECRET}", "X-Team": "blue"}


def test_a_viewer_without_the_change_permission_sees_keys_only(client: Client, transactional_db: None) -> None:
    docs = _with_secrets()
    viewer = User.objects.create_user("viewer", password="a-long-password", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_mcpserverentry"))
    client.force_login(viewer)
    page = client.get(f"{LIST}{docs.pk}/change/").content.decode()
    assert "TOKEN" in page and "Authorization" in page
    assert ENV_SECRET not in page and HEADER_SECRET not in page


@pytest.mark.clients
def test_the_files_servers_appear_read_only_with_status_tools_and_last_error(server, operator, tmp_path: Path) -> None:
    servers = {"filed": fake_stdio(), "gone": {"command": str(tmp_path / "no-such-program")}}
    with mcp_servers(server, tmp_path, servers, MCP_RESTART_BACKOFF_SECONDS=30.0):
        mcp_server_create(
            by=mcp_operator(),
            name="desk",
            transport="stdio",
            command=fake_stdio()["command"],
            args=fake_stdio()["args"],
            cwd=fake_stdio()["cwd"],
            paths=fake_stdio()["paths"],
        )
        httpx.get(f"{server.url}/agui/info", headers=AUTH)  # the pool is brought in line
        response = operator.get(LIST)
    page = response.content.decode()
    files = page[page.index('id="file-server-list"') :]
    filed = files[files.index('data-name="filed"') : files.index('data-name="gone"')]
    gone = files[files.index('data-name="gone"') :]
    assert "<td>up</td>" in filed and "<code>mcp__filed__ok</code>" in filed
    assert "<td>down" in gone and "its command was not found" in gone
    assert f'href="{LIST}' not in files  # nothing to open or change: the file is edited, not the admin
    admin_rows = page[: page.index('id="file-server-list"')]
    assert '<td class="field-status">up</td>' in admin_rows and '<td class="field-tool_count">9</td>' in admin_rows


def test_what_its_sandbox_shows_a_server_is_set_in_the_admin(operator, tmp_path: Path) -> None:
    dicts, notes = tmp_path / "dicts", tmp_path / "notes"
    dicts.mkdir()
    notes.mkdir()
    paths = json.dumps([str(dicts), f"{notes}:rw"])
    # The network box left unticked: no network.
    assert operator.post(ADD, _form(paths=paths, workspace="on")).status_code == 302
    config = McpServerEntry.objects.get(name="desk").as_config()
    assert (config.paths, config.network, config.workspace) == ((str(dicts), f"{notes}:rw"), False, True)
    response = operator.post(ADD, _form(name="other", paths='["srv"]'))
    assert "is not an absolute path" in " ".join(response.context["adminform"].form.errors["paths"])


def test_a_path_no_server_may_see_is_a_form_error(operator, tmp_path: Path) -> None:
    from django.conf import settings

    response = operator.post(ADD, _form(cwd=str(settings.DATA_DIR)))
    (error,) = response.context["adminform"].form.errors["cwd"]
    assert "It would not be started: its cwd" in error and "THREADLINE_DATA_DIR" in error
    response = operator.post(ADD, _form(paths=json.dumps([str(tmp_path / "not-there")])))
    assert "is not an existing file or directory" in response.context["adminform"].form.errors["paths"][0]
    assert not McpServerEntry.objects.exists()
