from django.urls import path

from threads import api

urlpatterns = [
    path("approvals/", api.ApprovalList.as_view(), name="api-approvals"),
    path("approvals/<str:approval_id>/answer", api.ApprovalAnswer.as_view(), name="api-approval-answer"),
]
