"""How a stdio MCP server is started: in the sandbox that holds bash (issue #46, item 3).

A stdio server is a command the server runs, often a package fetched from a registry; a hostile or
compromised one must reach no more than bash does. So it runs in bash's bubblewrap sandbox
(orchestrator/tools/sandbox.py, chosen from the settings by agents/confinement.py): as the sandbox
user (never root), with no capability, under bash's process and memory bounds, in a PID namespace of
its own (the server's processes are out of its sight and reach). Of the host it sees the system's
directories, its entry's ``cwd`` (read-only: where its code or package lives), the entry's ``paths``
(read-only, or read-write with ``:rw``), and the shared workspace read-write only when the entry says
``"workspace": true``. Never the data dir, the server's checkout or virtual environment, the users'
workspaces, the SQLite database or the database's and Redis's sockets: an entry naming a path in one of
them is not started, and its last error says which. Network is on unless the entry says
``"network": false`` (most servers call an API), and like bash's it is Threadline's proxy on a socket
bound in (every public host; never loopback, private, link-local or metadata addresses): the sandbox
never shares the host's network.

A server that cannot run confined (no bwrap, a path that does not exist, ...) is not started; its
last error, and the log at start-up, say why. ``MCP_SANDBOX=off`` is the operator's explicit way to
run stdio servers as before, unconfined, in ``cwd`` (default ``AGENT_WORKSPACE``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from agents.confinement import confined_sandbox, hidden_roots, server_code, server_egress_policy
from agents.mcp.config import READ_ONLY, READ_WRITE, ExpandedServer, ServerConfig
from agents.mcp.environment import server_environment
from orchestrator.tools.egressproxy import EgressProxy
from orchestrator.tools.sandbox import SYSTEM_DIRS, Sandbox

# Where PostgreSQL's clients look for its socket when the database's host names none.
_POSTGRES_SOCKETS = ("/run/postgresql", "/var/run/postgresql")


class McpNotConfined(Exception):
    """The server cannot run in its sandbox; the message says why (and it is not started). ``field``
    is the entry's field at fault, if one is."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(slots=True, frozen=True)
class Launch:
    """The process to start: bwrap's command line (or the server's own, unconfined), its environment
    and its directory (None: bwrap sets it)."""

    command: str
    args: list[str]
    env: dict[str, str]
    cwd: str | None


def server_sandbox(*, network: bool) -> Sandbox | str:
    """bash's sandbox as a stdio MCP server runs in it: a server is a process of its own, not a
    bash call, so it gets no call's cgroup; its bounds are the per-process ones. Like bash, it never
    shares the host's network: with ``network`` its way out is a proxy of its own (``stdio_process``)."""
    sandbox = confined_sandbox()
    if isinstance(sandbox, str):
        return sandbox
    egress = server_egress_policy() if network else None
    return replace(sandbox, cgroups=None, no_cgroup="an MCP server is not given a call's cgroup", egress=egress)


@contextlib.asynccontextmanager
async def stdio_process(
    config: ServerConfig, expanded: ExpandedServer, *, default_cwd: str = ""
) -> AsyncIterator[Launch]:
    """How to start the stdio server ``config`` (``stdio_launch``), with the proxy of its network
    (orchestrator/tools/egressproxy.py) serving while the server runs, when it has network."""
    if settings.MCP_SANDBOX == "off" or not config.network:
        yield stdio_launch(config, expanded, default_cwd=default_cwd)
        return
    async with EgressProxy(server_egress_policy(), lifetime=True) as proxy:
        yield stdio_launch(config, expanded, default_cwd=default_cwd, egress_socket=proxy.socket_path)


def stdio_launch(
    config: ServerConfig, expanded: ExpandedServer, *, default_cwd: str = "", egress_socket: str | None = None
) -> Launch:
    """How to start the stdio server ``config`` (its ``${VAR}`` already ``expanded``), its network
    through the proxy at ``egress_socket`` when it has network. Raises
    ``McpNotConfined`` when it cannot run in its sandbox, ``FileNotFoundError`` when its command is
    not there."""
    env = server_environment(expanded.env)
    if settings.MCP_SANDBOX == "off":
        return Launch(expanded.command, expanded.args, env, expanded.cwd or default_cwd or None)
    base = server_sandbox(network=config.network)
    if isinstance(base, str):
        raise McpNotConfined(
            f"it cannot run in a sandbox, so it is not started: {base}; "
            "or set MCP_SANDBOX=off to run stdio MCP servers without one"
        )
    workspace: Path | None = None
    if config.workspace:
        if settings.AGENT_WORKSPACE_MODE != "shared":
            raise McpNotConfined(
                '"workspace": true gives a server the shared workspace, and AGENT_WORKSPACE_MODE is '
                f"{settings.AGENT_WORKSPACE_MODE!r}: a server is shared by every run of this process, so it cannot "
                "be given each user's own workspace"
            )
        workspace = Path(settings.AGENT_WORKSPACE).resolve()
    cwd, shown, writable = shown_paths(expanded)
    sandbox = replace(
        base,
        workspace=workspace,
        hidden=_hidden(),
        read_only=(),
        shown=tuple(shown),
        writable=tuple(writable),
        workdir=cwd or workspace,
    )
    env = sandbox.environment(env)
    _check_command(expanded.command, cwd, sandbox, env.get("PATH", os.defpath))
    argv = sandbox.exec_argv([expanded.command, *expanded.args], egress_socket=egress_socket)
    return Launch(argv[0], argv[1:], env, None)


def shown_paths(expanded: ExpandedServer) -> tuple[Path | None, list[Path], list[Path]]:
    """The server's ``cwd`` (None when it names none), what its sandbox shows read-only (the ``cwd``
    and its read-only ``paths``) and read-write, each resolved. Raises ``McpNotConfined``, naming the
    field, for a path that is not there or that would show what no server may see."""
    cwd = _existing("cwd", expanded.cwd, directory=True) if expanded.cwd else None
    shown: list[Path] = [cwd] if cwd is not None else []
    writable: list[Path] = []
    for written in expanded.paths:
        if written.endswith(READ_WRITE):
            writable.append(_existing("paths", written.removesuffix(READ_WRITE)))
        else:
            shown.append(_existing("paths", written.removesuffix(READ_ONLY)))
    named = [("cwd", cwd)] if cwd is not None else []
    for field, path in [*named, *(("paths", path) for path in (*shown[len(named) :], *writable))]:
        _refuse_the_servers_own(field, path)
    return cwd, shown, writable


def _existing(field: str, written: str, *, directory: bool = False) -> Path:
    path = Path(written)
    if not path.is_absolute():
        raise McpNotConfined(f"its {field} {written!r} is not an absolute path", field=field)
    resolved = path.resolve()  # what bwrap binds: a link's target, which is what is checked
    if not (resolved.is_dir() if directory else resolved.exists()):
        what = "directory" if directory else "file or directory"
        raise McpNotConfined(
            f"its {field} {written!r} is not an existing {what}, so its sandbox cannot show it", field=field
        )
    return resolved


def never_shown() -> list[tuple[str, Path]]:
    """What no MCP server may see, each with what it is: the data dir, the users' and the shared
    workspaces, the server's checkout and virtual environments, the SQLite database, the database's
    and Redis's sockets."""
    places = [(name, path) for name, path in hidden_roots()]
    places += [("the server's code (its checkout or virtual environment)", path) for path in server_code()]
    database = settings.DATABASES["default"]
    name, host = str(database.get("NAME") or ""), str(database.get("HOST") or "")
    if database["ENGINE"] == "django.db.backends.sqlite3" and name != ":memory:":
        places.append(("the SQLite database", Path(name).resolve()))
    elif host.startswith("/"):
        places.append(("the database's socket", Path(host).resolve()))
    elif not host:
        places += [("the database's socket", Path(path).resolve()) for path in _POSTGRES_SOCKETS]
    redis: str = getattr(settings, "REDIS_URL", "") or ""
    if redis.startswith("unix://"):
        places.append(("Redis's socket", Path(urlsplit(redis).path).resolve()))
    return places


def _refuse_the_servers_own(field: str, path: Path) -> None:
    """Refuses a path inside one of ``never_shown``; one that holds one is fine (its sandbox covers
    a directory with an empty one), but not one that holds a database file or socket."""
    hidden = _hidden()
    for what, place in never_shown():
        inside = path.is_relative_to(place)
        holds_unhideable = place.is_relative_to(path) and not any(place.is_relative_to(cover) for cover in hidden)
        if inside or holds_unhideable:
            raise McpNotConfined(
                f"its {field} {str(path)!r} would show {what} ({place}), which no MCP server may see; "
                "give it a directory of its own (its package, or data of its own)",
                field=field,
            )


def _hidden() -> tuple[Path, ...]:
    """The directories its sandbox covers with empty ones, wherever a path it shows holds them."""
    paths = [path for _, path in hidden_roots()] + list(server_code())
    kept = [path for path in dict.fromkeys(paths) if path.is_dir()]
    return tuple(p for p in kept if not any(p != other and p.is_relative_to(other) for other in kept))


def _check_command(command: str, cwd: Path | None, sandbox: Sandbox, search_path: str) -> None:
    """Raises ``FileNotFoundError`` when ``command`` is not there, and ``McpNotConfined`` when it lies
    outside what the sandbox shows: found on the host as the sandbox will look for it, in the
    directories of ``PATH`` that it shows."""
    visible = [
        *(Path(name) for name in SYSTEM_DIRS),
        *sandbox.shown,
        *sandbox.writable,
        *([sandbox.workspace] if sandbox.workspace is not None else []),
    ]

    targets = [root.resolve() for root in visible]

    def shows(path: Path) -> bool:
        return any(path.is_relative_to(root) for root in visible)

    if "/" in command:
        found = Path(command) if command.startswith("/") else (cwd or Path("/nonexistent")) / command
        if not found.exists():
            raise FileNotFoundError(errno.ENOENT, "not found", command)
    else:
        directories = [entry for entry in search_path.split(os.pathsep) if entry and shows(Path(entry))]
        which = shutil.which(command, path=os.pathsep.join(directories))
        if which is None:
            raise FileNotFoundError(errno.ENOENT, "not found in the directories of PATH its sandbox shows", command)
        found = Path(which)
    # As named (the sandbox looks it up so) and where its links lead (what it then runs).
    if not (shows(found.absolute()) and any(found.resolve().is_relative_to(root) for root in targets)):
        raise McpNotConfined(
            f"its command {str(found)!r} lies outside what its sandbox shows (the system's directories, its cwd "
            f"and paths); add the directory that holds it ({found.resolve().parent}) to its paths"
        )


def stdio_note() -> str:
    """One line for start-up: how stdio MCP servers run, or why none can be started."""
    if settings.MCP_SANDBOX == "off":
        return "stdio servers run WITHOUT a sandbox, as the server's user (MCP_SANDBOX=off)"
    sandbox = server_sandbox(network=True)
    if isinstance(sandbox, str):
        return f"stdio servers are NOT started: {sandbox}; or set MCP_SANDBOX=off to run them without a sandbox"
    return f"stdio servers run in bash's sandbox ({sandbox.describe()}), seeing only their cwd and paths"
