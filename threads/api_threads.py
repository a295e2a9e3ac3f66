"""REST: threads, each with its transcript, its runs, its state document and its sub-agent board.

A thread is addressed by its AG-UI thread id, which is unique. A user sees the
threads they own and everything under them; staff see all. Another user's
thread is a 404, like one that does not exist, so ids do not leak.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from threads.api_errors import error_responses
from threads.api_query import ApiView, ListView, text_filter
from threads.api_runs import RunOutput
from threads.api_subagents import SubAgentTaskListOutput
from threads.models import Run, SubAgentTask, Thread
from threads.selectors import (
    run_list,
    thread_detail,
    thread_get_visible,
    thread_list,
    thread_subagent_tasks,
)
from threads.workspace_reads import WorkspaceInfo, workspace_info

THREAD_ID = OpenApiParameter("thread_id", str, OpenApiParameter.PATH, description="The AG-UI thread id.")


def _visible_thread(request: Request, thread_id: str) -> Thread:
    thread = thread_get_visible(user=request.user, agui_thread_id=thread_id)
    if thread is None:
        raise NotFound("no such thread")
    return thread


class ThreadOutput(serializers.Serializer[Thread]):
    threadId = serializers.CharField(source="agui_thread_id", help_text="The AG-UI thread id, its address here.")
    title = serializers.CharField(help_text="Its name: the first user message, shortened, until its owner renames it.")
    archived = serializers.BooleanField(help_text="Archived by its owner: left out of their thread list.")
    agent = serializers.CharField(source="agent.name")
    owner = serializers.CharField(source="owner.username", allow_null=True, default=None)
    messageCount = serializers.IntegerField(source="message_count")
    runCount = serializers.IntegerField(source="run_count")
    createdAt = serializers.DateTimeField(source="created_at")
    updatedAt = serializers.DateTimeField(source="updated_at")


class ThreadFilter(serializers.Serializer[dict[str, Any]]):
    agent = text_filter(max_length=64, help_text="An agent's name.")
    owner = text_filter(max_length=150, help_text="The owner's username or user id.")
    updated_since = serializers.DateTimeField(
        required=False, help_text="Only threads updated at or after this ISO 8601 time (UTC if no offset)."
    )


@extend_schema(parameters=[ThreadFilter], responses={200: ThreadOutput(many=True), **error_responses(400, 404)})
class ThreadList(ListView[Thread]):
    """GET /api/threads/?agent=&owner=&updated_since=: threads, most recently updated first."""

    serializer_class = ThreadOutput
    query_filter = ThreadFilter

    def get_queryset(self) -> QuerySet[Thread]:
        return thread_list(user=self.request.user, **self.query())


class WorkspaceOutput(serializers.Serializer[WorkspaceInfo]):
    path = serializers.CharField(
        help_text="Where the thread's runs work, relative to the workspaces root; empty for the shared workspace."
    )
    bytes = serializers.IntegerField(allow_null=True, help_text="What its files hold; null before a run made it.")
    createdAt = serializers.DateTimeField(source="created_at", allow_null=True)


class ThreadDetailOutput(ThreadOutput):
    workspace = serializers.SerializerMethodField(help_text="The thread's workspace (AGENT_WORKSPACE_MODE).")
    messages = serializers.SerializerMethodField(
        help_text="The transcript: each message's AG-UI body, in order, as a client would rebuild it."
    )

    @extend_schema_field(WorkspaceOutput)
    def get_workspace(self, thread: Thread) -> dict[str, Any]:
        return dict(WorkspaceOutput(workspace_info(thread)).data)

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_messages(self, thread: Thread) -> list[Any]:
        return [message.body for message in thread.messages.all()]


@extend_schema(parameters=[THREAD_ID], responses={200: ThreadDetailOutput, **error_responses(404)})
class ThreadDetail(ApiView):
    """GET /api/threads/<thread_id>/: the thread and its transcript."""

    def get(self, request: Request, thread_id: str) -> Response:
        thread = thread_detail(user=request.user, agui_thread_id=thread_id)
        if thread is None:
            raise NotFound("no such thread")
        return Response(ThreadDetailOutput(thread).data)


@extend_schema(
    parameters=[THREAD_ID],
    responses={200: OpenApiTypes.OBJECT, **error_responses(404)},
    description="The thread's shared-state document (what AG-UI's STATE_SNAPSHOT carries), as kept across runs.",
)
class ThreadState(ApiView):
    """GET /api/threads/<thread_id>/state/: the state document."""

    def get(self, request: Request, thread_id: str) -> Response:
        return Response(_visible_thread(request, thread_id).state)


@extend_schema(parameters=[THREAD_ID], responses={200: RunOutput(many=True), **error_responses(400, 404)})
class ThreadRunList(ListView[Run]):
    """GET /api/threads/<thread_id>/runs/: the thread's runs, newest first."""

    serializer_class = RunOutput

    def get_queryset(self) -> QuerySet[Run]:
        return run_list(thread=_visible_thread(self.request, self.kwargs["thread_id"]))


@extend_schema(parameters=[THREAD_ID], responses={200: SubAgentTaskListOutput(many=True), **error_responses(400, 404)})
class ThreadSubAgentTaskList(ListView[SubAgentTask]):
    """GET /api/threads/<thread_id>/subagent-tasks/: the thread's sub-agent board, in the order tasks started."""

    serializer_class = SubAgentTaskListOutput

    def get_queryset(self) -> QuerySet[SubAgentTask]:
        return thread_subagent_tasks(thread=_visible_thread(self.request, self.kwargs["thread_id"]))
