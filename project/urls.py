from django.contrib import admin
from django.urls import include, path

from agui.views import metrics

urlpatterns = [
    path("agui/", include("agui.urls")),
    path("admin/", admin.site.urls),
    path("api/", include("threads.api_urls")),
    path("metrics", metrics, name="metrics"),
]
