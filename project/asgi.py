"""ASGI entry point: AG-UI routes go to a lean handler, everything else to Django's standard one."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from django.core.asgi import get_asgi_application

django_app = get_asgi_application()

from django.conf import settings

from agui.asgi import AguiHandler
from project.fdlimit import raise_open_file_limit
from project.gctune import tune_gc

raise_open_file_limit()

agui_app = AguiHandler()


tune_gc()


async def _lifespan(receive: Any, send: Any) -> None:
    from agui.registry import REGISTRY

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            # Runs in flight get a grace period to finish and record themselves;
            # what is still running after it is cancelled and marked so.
            await REGISTRY.shutdown(grace=settings.SHUTDOWN_GRACE_SECONDS)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
    elif scope["type"] == "http" and scope["path"].startswith("/agui/"):
        await agui_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)
