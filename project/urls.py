from django.conf import settings
from django.contrib import admin
from django.urls import URLResolver, include, path, re_path
from django.urls.resolvers import RoutePattern

from agui.copilotkit.single_route import single_route
from agui.views import metrics
from project.app_page import app_asset, app_page
from project.home import home
from threads.admin.dashboard import dashboard_view

# The REST API's URLconf is imported when a path under /api/ is first resolved (or any URL is
# reversed): with DRF, drf-spectacular and what they import (psycopg, pygments, yaml, requests) it
# weighs about 20 MiB, which a process that only streams replies never needs (issue #27).
# include() would import it at once; a URLResolver given the module's name imports it on first use.
LAZY_API = URLResolver(RoutePattern("api/", is_endpoint=False), "threads.api_urls")

urlpatterns = [
    path("", home, name="home"),
    path(settings.AGUI_PATH.lstrip("/") + "/", include("agui.urls")),
    path(settings.COPILOTKIT_PATH.lstrip("/") + "/", include("agui.copilotkit.urls")),
    # Before the admin's own URLs, whose catch-all would take it for an app's name.
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="dashboard"),
    path(settings.COPILOTKIT_PATH.lstrip("/"), single_route, name="copilotkit-single-route"),
    path("admin/", admin.site.urls),
    # Django's own sign-in and sign-out: a page this server serves calls the CopilotKit routes
    # with the session they make (agui/http.py authenticate).
    path("accounts/", include("django.contrib.auth.urls")),
    # The CopilotKit page Threadline serves itself, behind that sign-in (project/app_page.py).
    path("app/", app_page, name="app"),
    re_path(r"^app/assets/(?P<path>.+)$", app_asset, name="app-asset"),
    LAZY_API,
    path("metrics", metrics, name="metrics"),
]

# An unknown path under /api/ gets the API's JSON error rather than an HTML page.
handler404 = "threads.api_errors.not_found"
