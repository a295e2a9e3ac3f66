"""Baseline 2: a minimal Django project (settings, URLconf and view in one module).

A plain async view returns a StreamingHttpResponse over an async generator of
the pre-encoded frames; Django's standard ASGIHandler serves it. No middleware,
no installed apps; a SQLite database is configured (never queried) so Django's
request signal handlers do what they do in any project.
"""

from __future__ import annotations

import os

from django.http import HttpRequest, StreamingHttpResponse
from django.urls import path
from frames import frames_for, paced, tokens_from_query

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = __name__
INSTALLED_APPS: list[str] = []
MIDDLEWARE: list[str] = []
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(os.environ.get("BENCH_TMP", "/tmp"), "django-baseline.sqlite3"),
    }
}
LOGGING_CONFIG = None


async def stream(request: HttpRequest) -> StreamingHttpResponse:
    frames = frames_for(tokens_from_query(request.META.get("QUERY_STRING", "")))
    response = StreamingHttpResponse(paced(frames), content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


urlpatterns = [path("stream", stream)]
