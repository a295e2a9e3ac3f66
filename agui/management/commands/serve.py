"""``manage.py serve``: serve Threadline on HOST:PORT and print the AG-UI URL and token."""

from __future__ import annotations

from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.confinement import bash_choice, startup_warnings
from agents.models import Agent


class Command(BaseCommand):
    help = "Serve Threadline (uvicorn, ASGI) on HOST:PORT and print the AG-UI URL and token."

    def add_arguments(self, parser: CommandParser) -> None:
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
        if workers > 1 and (settings.DATABASES["default"]["ENGINE"].endswith("sqlite3") or not settings.REDIS_URL):
            # Any process may take any thread's next request, so they share the database and the
            # channel layer; SQLite and the in-memory layer are one process's.
            raise CommandError("--workers above 1 needs DATABASE_URL (PostgreSQL) and REDIS_URL")
        host, port = settings.HOST, settings.PORT
        shown = f"[{host}]" if ":" in host else host
        agents = list(Agent.objects.filter(enabled=True).values_list("name", flat=True))
        first = agents[0] if agents else "coder"
        model = (
            "offline demo model (no ANTHROPIC_API_KEY set)"
            if not settings.ANTHROPIC_API_KEY
            else settings.ANTHROPIC_MODEL
        )
        origin = "generated, kept in the data dir" if settings.AGUI_TOKEN_GENERATED else "from AGUI_TOKEN"
        lines = [
            "",
            "Threadline is starting.",
            f"  AG-UI endpoint: http://{shown}:{port}/agui/{first}",
            f"  Agents:         {', '.join(agents) or '(none enabled)'}",
            f"  AG-UI token:    {settings.AGUI_TOKEN}   ({origin})",
            f"  Model:          {model}",
            f"  Workspace:      {settings.AGENT_WORKSPACE}",
            f"  Processes:      {workers}",
            f"  bash:           {bash_choice().note}",
            *(f"  WARNING:        {warning}" for warning in startup_warnings()),
            f"  Admin:          http://{shown}:{port}/admin/",
            "",
            f"  Try it:  curl -N -H 'Authorization: Bearer {settings.AGUI_TOKEN}' \\",
            "             -H 'Content-Type: application/json' \\",
            '             -d \'{"threadId":"t1","runId":"r1","messages":'
            '[{"id":"m1","role":"user","content":"hello"}]}\' \\',
            f"             http://{shown}:{port}/agui/{first}",
            "",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()
        uvicorn.run(
            "project.asgi:application",
            host=host,
            port=port,
            log_level="info",
            loop="auto",
            http="auto",
            lifespan="on",
            workers=workers,
            timeout_graceful_shutdown=int(settings.SHUTDOWN_GRACE_SECONDS) + 5,
        )
