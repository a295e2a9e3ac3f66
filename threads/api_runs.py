"""REST: runs and their event logs.

A run is addressed by its UUID (``id``): an AG-UI run id (``runId``) is chosen
by the client and is unique only within a thread, and an agent run that waited
for an answer spans several AG-UI runs, each a Run whose ``parentId`` is the
one before it.
"""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from threads.api_errors import error_responses
from threads.api_query import ApiView, ListView
from threads.logframes import LoggedEvent
from threads.models import Run
from threads.selectors import RunEventPages, run_event_list, run_get_visible

RUN_ID = OpenApiParameter("run_id", uuid.UUID, OpenApiParameter.PATH, description="The run's id (a UUID).")


class UsageOutput(serializers.Serializer[Any]):
    """Token usage, read from the ``*_tokens`` fields of the object it is given."""

    inputTokens = serializers.IntegerField(source="input_tokens")
    outputTokens = serializers.IntegerField(source="output_tokens")
    cacheReadTokens = serializers.IntegerField(source="cache_read_tokens")
    cacheWriteTokens = serializers.IntegerField(source="cache_write_tokens")


class RunOutput(serializers.Serializer[Run]):
    id = serializers.UUIDField(help_text="The run's address in this API.")
    runId = serializers.CharField(source="agui_run_id", help_text="The AG-UI run id (unique within its thread).")
    threadId = serializers.CharField(source="thread.agui_thread_id")
    parentId = serializers.UUIDField(
        source="parent_id", allow_null=True, help_text="The run this one continues (after an answer), if any."
    )
    status = serializers.ChoiceField(choices=Run.Status.choices)
    outcome = serializers.CharField()
    error = serializers.CharField()
    protocolVersion = serializers.CharField(source="protocol_version")
    usage = UsageOutput(source="*")
    eventCount = serializers.IntegerField(source="event_count")
    startedAt = serializers.DateTimeField(source="started_at")
    finishedAt = serializers.DateTimeField(source="finished_at", allow_null=True)


@extend_schema(parameters=[RUN_ID], responses={200: RunOutput, **error_responses(404)})
class RunDetail(ApiView):
    """GET /api/runs/<id>/: one run."""

    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        run = run_get_visible(user=request.user, run_id=run_id)
        if run is None:
            raise NotFound("no such run")
        return Response(RunOutput(run).data)


class EventOutput(serializers.Serializer[LoggedEvent]):
    seq = serializers.IntegerField(help_text="The event's position in the run's log, from 1.")
    type = serializers.CharField(help_text="The AG-UI event type, e.g. TEXT_MESSAGE_CONTENT.")
    createdAt = serializers.DateTimeField(source="created_at")
    payload = serializers.SerializerMethodField(help_text="The event as it was streamed (AG-UI JSON).")

    @extend_schema_field(serializers.DictField())
    def get_payload(self, event: LoggedEvent) -> Any:
        return event.data


class EventFilter(serializers.Serializer[dict[str, Any]]):
    after = serializers.IntegerField(
        required=False, default=0, min_value=0, max_value=2**31 - 1, help_text="Only events with a larger seq."
    )


@extend_schema(
    parameters=[RUN_ID, EventFilter], responses={200: EventOutput(many=True), **error_responses(400, 404, 410)}
)
class RunEventList(ListView[Run]):
    """GET /api/runs/<id>/events/?after=<seq>: the run's event log in order, event by event (the
    log stores frames of events; a page reads the frames it needs). A run whose log was pruned
    (EVENT_LOG_RETENTION_DAYS) answers 410."""

    serializer_class = EventOutput  # type: ignore[assignment]  # it lists events, not a model
    query_filter = EventFilter

    def get_queryset(self) -> RunEventPages:  # type: ignore[override]
        run = run_get_visible(user=self.request.user, run_id=self.kwargs["run_id"])
        if run is None:
            raise NotFound("no such run")
        if run.events_pruned_at is not None:
            raise EventLogPruned()
        return run_event_list(run=run, after=self.query()["after"])


class EventLogPruned(APIException):
    status_code = 410
    default_code = "event_log_pruned"
    default_detail = "this run's event log was removed after EVENT_LOG_RETENTION_DAYS; its transcript remains"
