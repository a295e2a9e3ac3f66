"""The URLconf of the AG-UI handler (agui/asgi.py): the AG-UI routes alone.

Resolving a path imports its whole URLconf; the project's (project/urls.py) brings
the admin, the REST API, DRF and drf-spectacular, about 35 MiB of modules that an
AG-UI request never uses (issue #14, a lean process). They load with the first
request that needs them.
"""

from __future__ import annotations

from django.conf import settings
from django.urls import include, path

from agui.copilotkit.single_route import single_route

urlpatterns = [
    path(settings.AGUI_PATH.lstrip("/") + "/", include("agui.urls")),
    path(settings.COPILOTKIT_PATH.lstrip("/") + "/", include("agui.copilotkit.urls")),
    # CopilotKit's single-route form: the runtime's URL itself, with a method envelope.
    path(settings.COPILOTKIT_PATH.lstrip("/"), single_route, name="copilotkit-single-route"),
]

handler404 = "agui.http.not_found"
