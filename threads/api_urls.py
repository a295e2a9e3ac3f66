"""The REST API under /api/ (docs/rest-api.md). Lists are paginated (?page=, ?page_size=)."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from threads import api_agents, api_approvals, api_runs, api_spend, api_subagents, api_threads

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("threads/", api_threads.ThreadList.as_view(), name="api-threads"),
    path("threads/<str:thread_id>/", api_threads.ThreadDetail.as_view(), name="api-thread"),
    path("threads/<str:thread_id>/state/", api_threads.ThreadState.as_view(), name="api-thread-state"),
    path("threads/<str:thread_id>/runs/", api_threads.ThreadRunList.as_view(), name="api-thread-runs"),
    path(
        "threads/<str:thread_id>/subagent-tasks/",
        api_threads.ThreadSubAgentTaskList.as_view(),
        name="api-thread-subagent-tasks",
    ),
    path("runs/<uuid:run_id>/", api_runs.RunDetail.as_view(), name="api-run"),
    path("runs/<uuid:run_id>/events/", api_runs.RunEventList.as_view(), name="api-run-events"),
    path("approvals/", api_approvals.ApprovalList.as_view(), name="api-approvals"),
    path("approvals/<str:approval_id>/", api_approvals.ApprovalDetail.as_view(), name="api-approval"),
    path("approvals/<str:approval_id>/answer", api_approvals.ApprovalAnswer.as_view(), name="api-approval-answer"),
    path("subagent-tasks/", api_subagents.SubAgentTaskList.as_view(), name="api-subagent-tasks"),
    path("subagent-tasks/<str:task_id>/", api_subagents.SubAgentTaskDetail.as_view(), name="api-subagent-task"),
    path("spend/", api_spend.SpendList.as_view(), name="api-spend"),
    path("agents/", api_agents.AgentList.as_view(), name="api-agents"),
    path("agents/<str:name>/", api_agents.AgentDetail.as_view(), name="api-agent"),
    path("permission-rules/", api_agents.PermissionRuleList.as_view(), name="api-permission-rules"),
    path("permission-rules/<int:rule_id>/", api_agents.PermissionRuleDetail.as_view(), name="api-permission-rule"),
]
