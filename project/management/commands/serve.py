"""``manage.py serve``: serve Threadline on HOST:PORT (and AGUI_PORT) and print the AG-UI URL and token."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from agents.confinement import bash_choice, startup_warnings
from agents.mcp.sandboxing import stdio_note
from agents.models import Agent
from project.draining import AFTER_DRAIN_SECONDS, DrainingServer, Workers
from project.fdlimit import FILES_BESIDES_CONNECTIONS
from project.management.commands.firstlogin import FILE as FIRST_LOGIN
from project.server import raise_file_limit, uvicorn_options


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket as uvicorn binds its own (address reuse, IPv6 when the host is one)."""
    sock = uvicorn.Config("project.asgi:application", host=host, port=port).bind_socket()
    # uvicorn makes it inheritable for worker processes; here it would be inherited by the agent's
    # bash commands, and one left running would hold the port after the server stopped.
    sock.set_inheritable(False)
    return sock


def _check_apart() -> None:
    """Django's system checks, run by ``manage.py check`` in a process of its own.

    The checks import every module of the site (the URL checks the REST API with DRF and
    drf-spectacular, the template checks every template library, DRF's bringing psycopg): run in
    the server's process they would stay loaded for its whole life, about 20 MiB that streaming a
    reply never uses (issue #27). The child loads them, reports, and is gone."""
    done = subprocess.run(
        [sys.executable, str(settings.BASE_DIR / "manage.py"), "check"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise CommandError(f"the system checks failed:\n{done.stderr}{done.stdout}")
    if "identified no issues" not in done.stdout:  # warnings, shown as the checks in process show them
        sys.stdout.write(done.stdout)


class Command(BaseCommand):
    help = "Serve Threadline (uvicorn, ASGI) on HOST:PORT, and AG-UI on AGUI_PORT when set; print the URL and token."
    # Run by _check_apart() instead, in a process of their own.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--skip-checks", action="store_true", help="Skip the system checks.")
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="Server processes sharing the port (needs PostgreSQL and REDIS_URL when more than one).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        workers: int = options["workers"]
        if workers < 1:
            raise CommandError("--workers must be 1 or more")
        if not options["skip_checks"]:
            _check_apart()
        if workers > 1 and (settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") or not settings.REDIS_URL):
            # Any process may take any thread's next request, so they share the database and the
            # channel layer; SQLite and the in-memory layer are one process's.
            raise CommandError("--workers above 1 needs DATABASE_URL (PostgreSQL) and REDIS_URL")
        host, port, agui_port = settings.HOST, settings.PORT, settings.AGUI_PORT
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if settings.TLS_CERT_FILE else "http"
        base = f"{scheme}://{shown}:{port}"
        agui_base = f"{scheme}://{shown}:{agui_port or port}{settings.AGUI_PATH}"
        agents = list(Agent.objects.filter(enabled=True).values_list("name", flat=True))
        first = agents[0] if agents else "coder"
        model = (
            "offline demo model (no ANTHROPIC_API_KEY set)"
            if not settings.ANTHROPIC_API_KEY
            else settings.ANTHROPIC_MODEL
        )
        origin = "generated, kept in the data dir" if settings.AGUI_TOKEN_GENERATED else "from AGUI_TOKEN"
        file_limit = raise_file_limit(settings.SERVER_MAX_CONNECTIONS)
        lines = [
            "",
            "Threadline is starting.",
            f"  Home page:      {base}/",
            f"  Chat page:      {_app_page_line(base)}",
            f"  AG-UI endpoint: {agui_base}/{first}" + ("   (its own listener: AGUI_PORT)" if agui_port else ""),
            f"  Agents:         {', '.join(agents) or '(none enabled)'}",
            f"  AG-UI token:    {settings.AGUI_TOKEN}   ({origin})",
            f"  Model:          {model}",
            f"  Workspace:      {settings.AGENT_WORKSPACE}   (the shared token's threads)",
            f"  Workspaces:     {_workspaces_line()}",
            f"  Processes:      {workers}",
            f"  Connections:    {_connections_line(file_limit)}",
            f"  bash:           {bash_choice().note}",
            f"  MCP:            {stdio_note()}",
            *(f"  WARNING:        {warning}" for warning in startup_warnings()),
            f"  Admin:          {base}/admin/",
            "",
            f"  Try it:  curl -N -H 'Authorization: Bearer {settings.AGUI_TOKEN}' \\",
            "             -H 'Content-Type: application/json' \\",
            '             -d \'{"threadId":"t1","runId":"r1","messages":'
            '[{"id":"m1","role":"user","content":"hello"}]}\' \\',
            f"             {agui_base}/{first}",
            "",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
        config = uvicorn.Config(
            "project.asgi:application",
            host=host,
            port=port,
            log_level="info",
            loop="auto",
            lifespan="on",
            workers=workers,
            **uvicorn_options(),
            # Once drained (project/draining.py): connections left follow runs of other processes.
            timeout_graceful_shutdown=AFTER_DRAIN_SECONDS,
            ssl_certfile=settings.TLS_CERT_FILE or None,
            ssl_keyfile=settings.TLS_KEY_FILE or None,
        )
        # One server on both sockets: one lifespan (runs in flight get their grace period once) and
        # one set of signal handlers. The application tells the ports apart (project/asgi.py).
        sockets = [_bind(host, port)] + ([_bind(host, agui_port)] if agui_port else [])
        if workers > 1:
            # uvicorn's supervisor with draining workers: each serves the same sockets; SIGHUP restarts
            # them one at a time. It serves no request itself, so it lets go of the connections it
            # read the agents with.
            _close_database_pool()
            Workers(config, sockets=sockets).run()
        else:
            DrainingServer(config).run(sockets=sockets)


def _close_database_pool() -> None:
    """Closes this process's connections, and on PostgreSQL its pool (settings.DATABASE_POOL_SIZE)."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    wrapper.close()
    if wrapper.vendor == "postgresql":
        from django.db.backends.postgresql.base import DatabaseWrapper

        assert isinstance(wrapper, DatabaseWrapper)
        wrapper.close_pool()


def _connections_line(file_limit: int) -> str:
    """The connection cap of each process and where it comes from, for the start-up banner."""
    shown = "unlimited" if file_limit == resource.RLIM_INFINITY else str(file_limit)
    if settings.SERVER_MAX_CONNECTIONS_FROM_FILE_LIMIT:
        origin = f"less {FILES_BESIDES_CONNECTIONS} for the process's own files"
    else:
        origin = "SERVER_MAX_CONNECTIONS"
    return f"cap {settings.SERVER_MAX_CONNECTIONS} (open-file limit {shown}; {origin}), per process"


def _workspaces_line() -> str:
    """Where users' runs work (AGENT_WORKSPACE_MODE), for the start-up banner."""
    root = settings.AGENT_WORKSPACES_ROOT
    return {
        "owner": f"each user's own, in {root}/users/<user id> (AGENT_WORKSPACE_MODE=owner)",
        "thread": f"each thread's own, in {root}/threads/<thread> (AGENT_WORKSPACE_MODE=thread)",
        "shared": "everybody in the shared workspace: users are NOT isolated (AGENT_WORKSPACE_MODE=shared)",
    }[settings.AGENT_WORKSPACE_MODE]


def _app_page_line(base: str) -> str:
    """Where the CopilotKit page is, or why it is not served (project/app_page.py)."""
    if not (settings.APP_PAGE_DIR / "index.html").is_file():
        return f"{base}/app/ is not built (it needs Node.js 20+ and npm: make run builds it once)"
    if settings.AGUI_PORT:
        return f"{base}/app/ cannot reach the CopilotKit routes on their own port (AGUI_PORT): unset it to use the page"
    first = settings.DATA_DIR / FIRST_LOGIN
    if first.is_file():
        return f"{base}/app/   (sign in as admin: its first password is in {first})"
    return f"{base}/app/   (sign in as a Django user: manage.py createsuperuser makes one)"
