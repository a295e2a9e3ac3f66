from django.urls import path

from agui import views as agui_views
from agui.copilotkit import threads, uploads, views

# The paths of @copilotkit/runtime 1.75's router (dist/v2/runtime/core/fetch-router.mjs).
urlpatterns = [
    path("info", views.info, name="copilotkit-info"),
    # The same view as POST /agui/<agent>: one AG-UI stream, both protocol versions.
    path("agent/<slug:agent_name>/run", agui_views.run, name="copilotkit-run"),
    path("agent/<slug:agent_name>/connect", views.connect, name="copilotkit-connect"),
    path("agent/<slug:agent_name>/stop/<str:thread_id>", views.stop, name="copilotkit-stop"),
    # Threadline's own: where useAttachments' onUpload may send a file (not a CopilotKit route).
    path("attachments", uploads.attachment_upload, name="copilotkit-attachments"),
    path("attachments/<str:attachment_id>", uploads.attachment_download, name="copilotkit-attachment"),
    path("threads", threads.thread_list, name="copilotkit-threads"),
    path("threads/<str:thread_id>", threads.thread_update, name="copilotkit-thread"),
    path("threads/<str:thread_id>/archive", threads.thread_archive, name="copilotkit-thread-archive"),
    path("threads/<str:thread_id>/messages", threads.thread_messages, name="copilotkit-thread-messages"),
    path("threads/<str:thread_id>/events", threads.thread_events, name="copilotkit-thread-events"),
    path("threads/<str:thread_id>/state", threads.thread_state, name="copilotkit-thread-state"),
]
