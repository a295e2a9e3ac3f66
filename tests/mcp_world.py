"""MCP servers for the tests: the MCP project's reference server (@modelcontextprotocol/server-everything,
installed with the test clients) and this suite's own misbehaving fake (tests/fakes/mcp_server.py),
written into a ``.mcp.json`` that MCP_SERVERS names for the test."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.agui_client import CLIENTS_DIR

EVERYTHING = CLIENTS_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FAKE_SERVER = Path(__file__).resolve().parent / "fakes" / "mcp_server.py"


def everything_stdio() -> dict[str, Any]:
    if not EVERYTHING.is_file() or shutil.which("node") is None:
        pytest.skip("the MCP reference server is not installed (make install-test)")
    return {"command": "node", "args": [str(EVERYTHING), "stdio"]}


def fake_stdio(*args: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(FAKE_SERVER), *args], "env": dict(env or {})}


def mcp_operator() -> Any:
    """A superuser: the one who may add, change and delete MCP servers (agents/services.py)."""
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(
        username="mcp-operator", defaults={"is_superuser": True, "is_staff": True, "email": "mcp@example.com"}
    )
    return user


async def _stop_servers() -> None:
    from agents.mcp.pool import stop_mcp_servers

    await stop_mcp_servers()


@contextmanager
def mcp_servers(
    server: Any, tmp_path: Path, servers: Mapping[str, Mapping[str, Any]], **settings: Any
) -> Iterator[Path]:
    """Configures ``servers`` for the test (and stops them after it, on the server's loop)."""
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    try:
        with override_settings(MCP_SERVERS=str(path), **settings):
            yield path
    finally:
        server.drain()
        server.call(_stop_servers())


def mcp_tool_names(request_body: Mapping[str, Any]) -> list[str]:
    return [tool["name"] for tool in request_body.get("tools", []) if tool["name"].startswith("mcp__")]
