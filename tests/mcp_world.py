"""MCP servers for the tests: the MCP project's reference server (@modelcontextprotocol/server-everything,
installed with the test clients) and this suite's own misbehaving fake (tests/fakes/mcp_server.py),
written into a ``.mcp.json`` that MCP_SERVERS names for the test."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from tests.agui_client import CLIENTS_DIR

EVERYTHING = CLIENTS_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FAKE_SERVER = Path(__file__).resolve().parent / "fakes" / "mcp_server.py"


# stdio servers run in bash's sandbox (issue #46), which shows them neither the checkout nor its
# virtual environment: the servers the tests start live outside both, as an operator's would.
PYTHON = Path(sys.base_prefix).resolve() / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
_OUTSIDE = Path(tempfile.mkdtemp(prefix="threadline-test-mcp-"))
atexit.register(shutil.rmtree, _OUTSIDE, ignore_errors=True)
_OUTSIDE.chmod(0o755)


def _python_paths() -> list[str]:
    """What the sandbox must show for the interpreter to run: its installation, unless it is the system's."""
    prefix = Path(sys.base_prefix).resolve()
    return [] if any(prefix.is_relative_to(name) for name in ("/usr", "/bin", "/lib")) else [str(prefix)]


@functools.cache
def fakes_home() -> Path:
    """A copy of tests/fakes/ outside the checkout, readable by the sandbox's user."""
    home = _OUTSIDE / "fakes"
    shutil.copytree(FAKE_SERVER.parent, home, ignore=shutil.ignore_patterns("__pycache__", "anthropic_api"))
    for path in (home, *home.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return home


@functools.cache
def _everything_home() -> Path:
    """The reference server's packages outside the checkout (hard links where the file system allows)."""
    packages = EVERYTHING.resolve().parents[3]  # node_modules
    home = _OUTSIDE / "node_modules"

    def link(source: str, target: str) -> None:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)

    shutil.copytree(packages, home, copy_function=link, symlinks=True)
    return home


def everything_stdio() -> dict[str, Any]:
    if not EVERYTHING.is_file() or shutil.which("node") is None:
        pytest.skip("the MCP reference server is not installed (make install-test)")
    home = _everything_home()
    script = home / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    return {"command": "node", "args": [str(script), "stdio"], "cwd": str(home)}


def writable_by_the_sandbox(path: Path) -> str:
    """``path`` (a file, made if missing) as a ``paths`` entry the sandbox's user may write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    path.chmod(0o666)
    return f"{path}:rw"


def hostile_stdio(*paths: str, network: bool | None = None) -> dict[str, Any]:
    """The hostile fake (tests/fakes/hostile_mcp_server.py), shown ``paths`` besides its interpreter."""
    home = fakes_home()
    entry = {"command": str(PYTHON), "args": [str(home / "hostile_mcp_server.py")], "cwd": str(home)}
    return entry | {"paths": [*_python_paths(), *paths]} | ({} if network is None else {"network": network})


def fake_stdio(*args: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This suite's fake server (tests/fakes/mcp_server.py); a ``--record FILE`` is shown to it read-write."""
    home = fakes_home()
    paths = _python_paths()
    if "--record" in args:
        paths.append(writable_by_the_sandbox(Path(args[args.index("--record") + 1])))
    entry = {"command": str(PYTHON), "args": [str(home / FAKE_SERVER.name), *args], "env": dict(env or {})}
    return entry | {"cwd": str(home), "paths": paths}


def elicit_stdio(
    revision: str = "2025-11-25", *, record: Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The fake whose tools ask the person mid-call (tests/fakes/elicit_mcp_server.py), on ``revision``;
    a ``TOKEN`` in ``env`` is echoed in its questions."""
    home = fakes_home()
    args = [str(home / "elicit_mcp_server.py"), "--revision", revision]
    paths = _python_paths()
    if record is not None:
        args += ["--record", str(record)]
        paths.append(writable_by_the_sandbox(record))
    return {"command": str(PYTHON), "args": args, "cwd": str(home), "paths": paths, "env": dict(env or {})}


def elicitation_asked(server: Any, fake_api: Any, thread_id: str, tool: str = "book") -> dict[str, Any]:
    """The model calls the elicit fake's ``tool`` (configured as ``shop``), the call is approved and
    the server asks: the question's interrupt."""
    from tests.fakes.anthropic_api import text_turn, tool_turn
    from tests.helpers import run_input, user, v1
    from tests.sse import post_run

    fake_api.script([tool_turn(f"mcp__shop__{tool}", {}, id="toolu_b"), text_turn(["Done."])])
    asked = post_run(server.url, "coder", v1(run_input(thread_id, "r1", user("book", "u1"))))
    (approval,) = asked.events[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": approval["id"], "status": "resolved", "payload": {"approved": True}}]
    elicited = post_run(server.url, "coder", v1(run_input(thread_id, "r1", resume=resume)))
    (interrupt,) = elicited.events[-1]["outcome"]["interrupts"]
    assert interrupt["reason"] == "mcp:elicitation"
    return dict(interrupt)


def mcp_operator() -> Any:
    """A superuser: the one who may add, change and delete MCP servers (agents/services.py)."""
    from django.contrib.auth.models import User

    user, _ = User.objects.get_or_create(
        username="mcp-operator", defaults={"is_superuser": True, "is_staff": True, "email": "mcp@example.com"}
    )
    return user


def processes_naming(marker: str) -> dict[int, str]:
    """The host's processes whose command line holds the argument ``marker``, with their programs: a
    server runs in a PID namespace of its own (its sandbox), so the pid it tells is not the host's."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if marker.encode() in argv:
            found[int(entry.name)] = Path(argv[0].decode()).name
    return found


def server_process(marker: str) -> int:
    """The host's pid of the server started with the argument ``marker`` (not its sandbox's bwrap)."""
    (pid,) = [pid for pid, program in processes_naming(marker).items() if program != "bwrap"]
    return pid


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
