"""GET /app/: the CopilotKit page Threadline serves itself (issue #44 item 6), behind Django's login.

The page is examples/copilotkit built by vite in its ``app`` mode (``npx vite build --mode app``, which
``make run`` does once when Node is present) into ``APP_PAGE_DIR``, with ``base: "/app/"``. It talks
straight to ``/copilotkit`` with the session cookie and Django's CSRF token in ``X-CSRFToken``: the
page's HTML is given the token, the signed-in user's name and the sign-out address in ``<meta>``
tags. Its assets have content-hashed names and are the same for everyone, so they need no login.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.middleware.csrf import get_token
from django.urls import reverse
from django.utils._os import safe_join
from django.utils.html import format_html
from django.views.decorators.http import require_safe

NOT_BUILT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Threadline: the page is not built</title></head>
<body style="font: 16px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 4rem auto">
<h1>The page at /app/ is not built</h1>
<p>It is built from <code>examples/copilotkit</code> with Node.js 20 or newer and npm. Install them and run
<code>make run</code> again, which builds it once; or build it yourself:
<code>cd examples/copilotkit &amp;&amp; npm ci &amp;&amp; npx vite build --mode app</code>.</p>
<p>Everything else Threadline serves works without it: the AG-UI and CopilotKit routes, the admin and the API.</p>
</body></html>
"""


@require_safe
@login_required
def app_page(request: HttpRequest) -> HttpResponse:
    """The page's HTML for the signed-in user; 503 saying how to build it when it is not built."""
    try:
        html = (settings.APP_PAGE_DIR / "index.html").read_text(encoding="utf-8")
    except FileNotFoundError:
        return HttpResponse(NOT_BUILT, status=503, content_type="text/html; charset=utf-8")
    tags = format_html(
        '<meta name="csrf-token" content="{}"><meta name="threadline-user" content="{}">'
        '<meta name="logout-url" content="{}"><meta name="copilotkit-url" content="{}">',
        get_token(request),
        request.user.get_username(),
        reverse("logout"),
        settings.COPILOTKIT_PATH,
    )
    response = HttpResponse(html.replace("<head>", f"<head>{tags}", 1), content_type="text/html; charset=utf-8")
    # The HTML carries this session's CSRF token: no shared cache keeps it.
    response["Cache-Control"] = "private, no-store"
    return response


@require_safe
def app_asset(request: HttpRequest, path: str) -> HttpResponseBase:
    """A file of the built page (under ``assets/``, named by its content's hash). Read whole into the
    response: they are a few MiB at most, and a file's streamed response would be iterated
    synchronously under ASGI."""
    root = settings.APP_PAGE_DIR / "assets"
    try:
        file = Path(safe_join(root, path))
    except SuspiciousFileOperation:
        raise Http404("no such file of the page") from None
    if not file.is_file():
        raise Http404("no such file of the page")
    media_type, encoding = mimetypes.guess_type(file.name)
    response = HttpResponse(file.read_bytes(), content_type=media_type or "application/octet-stream")
    if encoding:
        response["Content-Encoding"] = encoding
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    response["X-Content-Type-Options"] = "nosniff"
    return response
