from django.urls import path

from agui import views

urlpatterns = [
    path("info", views.info, name="agui-info"),
    path("<slug:agent_name>", views.run, name="agui-run"),
    path("<slug:agent_name>/threads/<str:thread_id>/events", views.reattach, name="agui-thread-events"),
    path(
        "<slug:agent_name>/threads/<str:thread_id>/runs/<str:run_id>/cancel",
        views.cancel,
        name="agui-run-cancel",
    ),
    path(
        "<slug:agent_name>/threads/<str:thread_id>/runs/<str:run_id>/events",
        views.reattach,
        name="agui-run-events",
    ),
]
