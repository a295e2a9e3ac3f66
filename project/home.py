"""GET /: what this server is, where its doors are, and how to start the example page. No secrets."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from agents.models import Agent


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    base = request.build_absolute_uri("/").rstrip("/")
    # AG-UI may have a listener of its own (AGUI_PORT) and its own prefix (AGUI_PATH).
    agui_base = base
    if settings.AGUI_PORT:
        agui_base = f"{request.scheme}://{request.get_host().rsplit(':', 1)[0]}:{settings.AGUI_PORT}"
    agui_base += settings.AGUI_PATH
    agents = list(Agent.objects.filter(enabled=True).order_by("name").values("name", "description"))
    context = {
        "base": base,
        "agents": [{**agent, "url": f"{agui_base}/{agent['name']}"} for agent in agents],
        "first_agent": agents[0]["name"] if agents else "coder",
        # Whether a key is set, never the key itself.
        "model_key_set": bool(settings.ANTHROPIC_API_KEY),
        "model": settings.ANTHROPIC_MODEL,
    }
    return render(request, "home.html", context)
