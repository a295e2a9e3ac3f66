"""``manage.py serve``: serve Threadline on HOST:PORT and print the AG-UI URL and token."""

from __future__ import annotations

from typing import Any

import uvicorn
from django.conf import settings
from django.core.management.base import BaseCommand

from agents.confinement import bash_choice, startup_warnings
from agents.models import Agent
from project.server import raise_file_limit, uvicorn_options


class Command(BaseCommand):
    help = "Serve Threadline (uvicorn, ASGI) on HOST:PORT and print the AG-UI URL and token."

    def handle(self, *args: Any, **options: Any) -> None:
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
        raise_file_limit(settings.SERVER_MAX_CONNECTIONS)
        uvicorn.run(
            "project.asgi:application",
            host=host,
            port=port,
            log_level="info",
            loop="auto",
            lifespan="on",
            **uvicorn_options(),
            timeout_graceful_shutdown=int(settings.SHUTDOWN_GRACE_SECONDS) + 5,
        )
