"""The REST API under /api/ (README: REST API). Lists are paginated (?page=, ?page_size=)."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from threads import api_approvals

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("approvals/", api_approvals.ApprovalList.as_view(), name="api-approvals"),
    path("approvals/<str:approval_id>/", api_approvals.ApprovalDetail.as_view(), name="api-approval"),
    path("approvals/<str:approval_id>/answer", api_approvals.ApprovalAnswer.as_view(), name="api-approval-answer"),
]
