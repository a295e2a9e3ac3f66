from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("agui/", include("agui.urls")),
    path("admin/", admin.site.urls),
]
