"""REST: sub-agent tasks, the child runs a run delegated (the sub-agent board).

A task is addressed by its AG-UI ``subagentRunId``; it is visible to whoever
sees its thread.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from threads.api_errors import error_responses
from threads.api_query import ApiView, ListView
from threads.api_runs import UsageOutput
from threads.models import SubAgentTask
from threads.selectors import subagent_task_get_visible, subagent_task_list


class SubAgentTaskListOutput(serializers.Serializer[SubAgentTask]):
    id = serializers.CharField(help_text="The AG-UI subagentRunId.")
    threadId = serializers.CharField(source="thread.agui_thread_id")
    runId = serializers.CharField(source="run.agui_run_id", help_text="The AG-UI run id of the parent's run.")
    runUuid = serializers.UUIDField(source="run_id", help_text="The parent's run in this API (/api/runs/<id>/).")
    parentTaskId = serializers.CharField(
        source="parent_task_id", allow_null=True, help_text="The task that started this one, if nested."
    )
    depth = serializers.IntegerField()
    status = serializers.ChoiceField(choices=SubAgentTask.Status.choices)
    role = serializers.CharField()
    model = serializers.CharField()
    summary = serializers.CharField(help_text="What the parent's model was given back.")
    conclusion = serializers.CharField(
        help_text="The sub-agent's own verdict: success, partial, failed or blocked ('' while it runs)."
    )
    iterations = serializers.IntegerField()
    usage = UsageOutput(source="*")
    startedAt = serializers.DateTimeField(source="started_at")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)


class SubAgentTaskDetailOutput(SubAgentTaskListOutput):
    toolCallId = serializers.CharField(source="tool_call_id", help_text="The parent's sub_agent tool call.")
    prompt = serializers.CharField()
    allowedTools = serializers.ListField(source="allowed_tools", child=serializers.CharField())
    toolCalls = serializers.ListField(
        source="tool_calls",
        child=serializers.DictField(),
        help_text="The child's tool calls, in order: {id, name, arguments, isError}.",
    )
    error = serializers.CharField()

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        # "context" cannot be a class attribute: it would hide Serializer.context.
        fields = super().get_fields()
        fields["context"] = serializers.CharField(help_text="What the parent added to the prompt.")
        return fields


class SubAgentTaskFilter(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(choices=SubAgentTask.Status.choices, required=False)


@extend_schema(
    parameters=[SubAgentTaskFilter], responses={200: SubAgentTaskListOutput(many=True), **error_responses(400, 404)}
)
class SubAgentTaskList(ListView[SubAgentTask]):
    """GET /api/subagent-tasks/?status=: sub-agent tasks, newest first."""

    serializer_class = SubAgentTaskListOutput
    query_filter = SubAgentTaskFilter

    def get_queryset(self) -> QuerySet[SubAgentTask]:
        return subagent_task_list(user=self.request.user, status=self.query().get("status"))


@extend_schema(
    parameters=[OpenApiParameter("task_id", str, OpenApiParameter.PATH, description="The AG-UI subagentRunId.")],
    responses={200: SubAgentTaskDetailOutput, **error_responses(404)},
)
class SubAgentTaskDetail(ApiView):
    """GET /api/subagent-tasks/<id>/: one task with its prompt, tool calls and outcome."""

    def get(self, request: Request, task_id: str) -> Response:
        task = subagent_task_get_visible(user=request.user, task_id=task_id)
        if task is None:
            raise NotFound("no such sub-agent task")
        return Response(SubAgentTaskDetailOutput(task).data)
