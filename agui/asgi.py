"""The AG-UI routes' own Django handler, with only the middleware they need.

The standard middleware stack (sessions, CSRF, auth, messages) costs over a
millisecond per request and nothing on the AG-UI path uses it: requests there
authenticate with the bearer token. CORS stays.
"""

from __future__ import annotations

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler


class AguiHandler(ASGIHandler):
    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler reads settings.MIDDLEWARE; swap in the AG-UI list while
        # this handler builds its chain (once, at start-up).
        standard = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.AGUI_MIDDLEWARE
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = standard
