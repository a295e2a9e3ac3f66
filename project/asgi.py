"""ASGI entry point: AG-UI routes go to a lean handler, everything else to Django's standard one."""

from __future__ import annotations

import io
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

django.setup(set_prefix=False)

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

from agui.asgi import AguiHandler
from agui.body import GatedReceive, closing_send, declares_over, read_capped


class StandardHandler(ASGIHandler):
    """Django's handler for everything but the AG-UI routes (admin, REST API, static files), with
    bodies read in memory and capped as there: a body declared over the cap is not read (Django
    answers 400 for it), and a longer one is cut one byte past the cap."""

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        gate = GatedReceive(receive)
        if declares_over(scope, settings.DATA_UPLOAD_MAX_MEMORY_SIZE):
            gate.withhold()
        await super().handle(scope, gate, closing_send(send, gate))

    async def read_body(self, receive: Any) -> io.BytesIO:
        return await read_capped(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


django_app = StandardHandler()
agui_app = AguiHandler()


async def _lifespan(receive: Any, send: Any) -> None:
    from agui.runs import background_surface
    from runhost.host import HOST

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            HOST.start_sweeper(background_surface)
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            # Runs in flight get a grace period to finish and record themselves;
            # what is still running after it is cancelled and marked so.
            await HOST.shutdown(grace=settings.SHUTDOWN_GRACE_SECONDS)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
    elif scope["type"] == "http" and scope["path"].startswith("/agui/"):
        await agui_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)
