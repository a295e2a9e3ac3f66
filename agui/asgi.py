"""The AG-UI routes' own Django handler, with only the middleware they need.

It also reads request bodies its own way (agui/body.py): not at all without the
token or past the declared cap, and in memory, one byte past the cap at most.

The standard middleware stack (sessions, CSRF, auth, messages) costs over a
millisecond per request and nothing on the AG-UI path uses it: requests there
authenticate with the bearer token. CORS stays.
"""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

from agui.body import GatedReceive, body_admitted, closing_send, read_capped


class AguiHandler(ASGIHandler):
    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        gate = GatedReceive(receive)
        if not body_admitted(scope):
            gate.withhold()  # the view answers 401 or 413 without the body
        await super().handle(scope, gate, closing_send(send, gate))

    async def read_body(self, receive: Any) -> io.BytesIO:
        return await read_capped(receive, settings.AGUI_MAX_BODY_BYTES)

    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler reads settings.MIDDLEWARE; swap in the AG-UI list while
        # this handler builds its chain (once, at start-up).
        standard = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.AGUI_MIDDLEWARE
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = standard
