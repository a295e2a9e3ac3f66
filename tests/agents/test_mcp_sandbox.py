"""A stdio MCP server runs in the sandbox that holds bash (issue #46, item 3): a hostile one
(tests/fakes/hostile_mcp_server.py), started as a real subprocess through the pool by a server running
as root, reads no secret, no data dir, no other user's workspace, nothing of the checkout; writes only
what its entry names; cannot signal the server; stays within its process and memory bounds; has no
network when its entry says so, and otherwise leaves only through Threadline's proxy, as bash does. An
entry that names what no server may see is not started, saying why."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from agents.mcp.config import parse_servers
from agents.mcp.pool import McpPool
from tests.mcp_world import fakes_home, hostile_stdio, writable_by_the_sandbox

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="run as root with bubblewrap (as on CI)"
)

SECRETS = {"DJANGO_SECRET_KEY": "django-secret-1", "AGUI_TOKEN": "agui-secret-2", "ANTHROPIC_API_KEY": "sk-ant-3"}


@pytest.fixture
def host(tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """A server's host: its data dir with a secret in it, two users' workspaces and a shared one, each
    holding a file, and a file the hostile server's entry gives it to write."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    data = tmp_path / "data"
    roots = tmp_path / "workspaces"
    places = {
        "data": data / "django-secret-key",
        "other_user": roots / "users" / "2" / "notes.txt",
        "shared": tmp_path / "shared" / "notes.txt",
    }
    for path in places.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("private\n")
        path.chmod(0o666)  # even a file anyone may write is out of its reach
    settings.DATA_DIR = data
    settings.AGENT_WORKSPACES_ROOT = roots
    settings.AGENT_WORKSPACE = tmp_path / "shared"
    settings.AGENT_BASH_MAX_PROCESSES = 16
    settings.AGENT_BASH_MAX_MEMORY_BYTES = 256 << 20
    settings.MCP_SANDBOX = "on"
    yield places | {"allowed": tmp_path / "allowed" / "notes.txt", "sibling": tmp_path / "allowed" / "other.txt"}


async def _probe(config: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    pool = McpPool()
    await pool.reconcile(parse_servers({"mcpServers": {"hostile": config}}, source="test"))
    try:
        server = pool.servers["hostile"]
        assert server.up, server.last_error
        result = await server.call("probe", arguments)
        found: dict[str, Any] = json.loads(result.content[0].text)
        return found
    finally:
        await pool.stop()


async def test_a_hostile_server_reaches_no_secret_and_nothing_of_the_servers(host: dict[str, Path]) -> None:
    database = Path(django_settings.DATABASES["default"]["NAME"])
    checkout = Path(django_settings.BASE_DIR)
    reads = [host["data"], host["other_user"], host["shared"], database, checkout / "manage.py", checkout / ".venv"]
    reads += [Path(f"/proc/{os.getpid()}/environ"), Path.home() / ".profile"]
    config = hostile_stdio(writable_by_the_sandbox(host["allowed"]))
    status = "/proc/self/status"
    found = await _probe(config, {"env": sorted(SECRETS), "read": [status, *(str(path) for path in reads)]})
    assert found["uid"] == django_settings.AGENT_SANDBOX_UID
    held = [line for line in found["read"].pop(status).splitlines() if line.startswith("Cap")]
    assert len(held) == 5 and all(line.endswith("0000000000000000") for line in held), held  # no capability
    assert found["env"] == dict.fromkeys(SECRETS)
    for path, what in found["read"].items():
        assert what.startswith("refused: "), (path, what)


async def test_a_hostile_server_writes_only_what_its_entry_names(host: dict[str, Path]) -> None:
    config = hostile_stdio(writable_by_the_sandbox(host["allowed"]))
    targets = [host["allowed"], host["sibling"], host["data"], host["other_user"], host["shared"]]
    targets.append(fakes_home() / "dropped.txt")  # its cwd, which it may read only
    found = await _probe(config, {"write": [str(path) for path in targets]})
    assert found["write"].pop(str(host["allowed"])) == "written"
    assert "written by a hostile MCP server" in host["allowed"].read_text()
    for path, what in found["write"].items():
        assert what.startswith("refused: "), (path, what)
    assert not host["sibling"].exists() and not (fakes_home() / "dropped.txt").exists()
    assert all(host[name].read_text() == "private\n" for name in ("data", "other_user", "shared"))


async def test_a_hostile_server_cannot_signal_the_server(host: dict[str, Path]) -> None:
    found = await _probe(hostile_stdio(), {"signal": [os.getpid(), os.getppid()]})
    assert all(what.startswith("refused: ") for what in found["signal"].values()), found["signal"]


async def test_a_hostile_server_stays_within_its_process_and_memory_bounds(host: dict[str, Path]) -> None:
    found = await _probe(hostile_stdio(), {"fork": 40, "allocate": 1 << 30})
    assert found["fork"] < 16  # itself and its sandbox's first processes count too
    assert found["allocate"].startswith("refused: MemoryError")


async def test_a_server_whose_entry_says_so_has_no_network(host: dict[str, Path]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = list(listener.getsockname())
        found = await _probe(hostile_stdio(network=False), {"connect": address, "env": ["HTTP_PROXY"]})
    assert found["connect"].startswith("refused: "), found
    assert found["env"] == {"HTTP_PROXY": None}


@contextmanager
def _web_page(address: str) -> Iterator[str]:
    """A page served on ``address`` (a loopback one), for the duration."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"the page")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{address}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_server_with_network_leaves_only_through_the_proxy_which_refuses_the_hosts_own(
    host: dict[str, Path], settings: Any
) -> None:
    """Network is on by default, as bash's is with AGENT_BASH_NETWORK=on: the sandbox has no interface
    but its own loopback, and its way out is Threadline's proxy, which refuses loopback, private,
    link-local and metadata addresses (the database's port on 127.0.0.1 among them)."""
    with _web_page("127.0.0.2") as url, socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        probe = {"connect": list(listener.getsockname()), "fetch": [url], "env": ["HTTP_PROXY"]}
        found = await _probe(hostile_stdio(), probe)
        assert found["connect"].startswith("refused: "), found  # no way round the proxy
        assert found["env"]["HTTP_PROXY"] == "http://127.0.0.1:3128"
        assert found["fetch"][url].startswith("403 Threadline's network proxy refused 127.0.0.2"), found
        settings.AGENT_BASH_ALLOWED_PRIVATE_HOSTS = frozenset({"127.0.0.2"})  # the operator's one way in
        found = await _probe(hostile_stdio(), probe)
    assert found["fetch"][url] == "200 the page", found


@pytest.mark.parametrize("place", ["data", "other_user", "checkout"])
async def test_an_entry_naming_what_no_server_may_see_is_not_started(host: dict[str, Path], place: str) -> None:
    path = Path(django_settings.BASE_DIR) / "agents" if place == "checkout" else host[place].parent
    pool = McpPool()
    await pool.reconcile(parse_servers({"mcpServers": {"hostile": hostile_stdio(str(path))}}, source="test"))
    server = pool.servers["hostile"]
    try:
        assert not server.up
        assert f"its paths {str(path)!r} would show" in server.last_error
        assert "which no MCP server may see" in server.last_error
    finally:
        await pool.stop()


def _readable_file(path: Path, text: str) -> None:
    path.write_text(text)
    for place in (path, path.parent):
        place.chmod(0o755)


async def _last_error(config: dict[str, Any]) -> str:
    pool = McpPool()
    await pool.reconcile(parse_servers({"mcpServers": {"desk": config}}, source="test"))
    server = pool.servers["desk"]
    try:
        assert not server.up
        return server.last_error
    finally:
        await pool.stop()


async def test_a_server_that_cannot_run_confined_is_not_started_saying_why(
    host: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "no-bwrap-here"))
    error = await _last_error(hostile_stdio())
    assert "it cannot run in a sandbox, so it is not started: bubblewrap (bwrap) is missing" in error
    assert "MCP_SANDBOX=off" in error


async def test_a_command_its_sandbox_does_not_show_is_refused_naming_it(host: dict[str, Path]) -> None:
    venv_python = Path(django_settings.BASE_DIR) / ".venv" / "bin" / "python"
    error = await _last_error(hostile_stdio() | {"command": str(venv_python)})
    assert f"its command {str(venv_python)!r} lies outside what its sandbox shows" in error


async def test_a_server_asking_for_the_workspace_writes_it_in_shared_mode(host: dict[str, Path], settings: Any) -> None:
    settings.AGENT_WORKSPACE_MODE = "shared"
    shared = host["shared"]
    shared.parent.chmod(0o777)
    found = await _probe(hostile_stdio() | {"workspace": True}, {"write": [str(shared)], "read": [str(host["data"])]})
    assert found["write"] == {str(shared): "written"}
    assert found["read"][str(host["data"])].startswith("refused: ")


async def test_a_server_asking_for_the_workspace_is_not_started_when_each_user_has_one(
    host: dict[str, Path], settings: Any
) -> None:
    settings.AGENT_WORKSPACE_MODE = "owner"
    error = await _last_error(hostile_stdio() | {"workspace": True})
    assert '"workspace": true gives a server the shared workspace' in error and "'owner'" in error


async def test_a_path_that_holds_the_servers_own_directories_shows_them_empty(
    host: dict[str, Path], tmp_path: Path
) -> None:
    _readable_file(tmp_path / "dicts.txt", "words\n")
    reads = [tmp_path / "dicts.txt", host["data"], host["data"].parent, host["other_user"], host["shared"]]
    found = await _probe(hostile_stdio(str(tmp_path)), {"read": [str(path) for path in reads]})
    assert found["read"].pop(str(tmp_path / "dicts.txt")) == "read: words\n"
    assert found["read"].pop(str(host["data"].parent)) == "listed: "
    assert all(what.startswith("refused: ") for what in found["read"].values()), found["read"]
