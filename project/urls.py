from django.conf import settings
from django.contrib import admin
from django.urls import include, path

from agui.views import metrics
from project.home import home

urlpatterns = [
    path("", home, name="home"),
    path(settings.AGUI_PATH.lstrip("/") + "/", include("agui.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("threads.api_urls")),
    path("metrics", metrics, name="metrics"),
]

# An unknown path under /api/ gets the API's JSON error rather than an HTML page.
handler404 = "threads.api_errors.not_found"
