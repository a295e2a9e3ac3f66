from django.urls import path

from agui import views as agui_views
from agui.copilotkit import views

# The paths of @copilotkit/runtime 1.75's router (dist/v2/runtime/core/fetch-router.mjs).
urlpatterns = [
    path("info", views.info, name="copilotkit-info"),
    # The same view as POST /agui/<agent>: one AG-UI stream, both protocol versions.
    path("agent/<slug:agent_name>/run", agui_views.run, name="copilotkit-run"),
    path("agent/<slug:agent_name>/connect", views.connect, name="copilotkit-connect"),
    path("agent/<slug:agent_name>/stop/<str:thread_id>", views.stop, name="copilotkit-stop"),
]
