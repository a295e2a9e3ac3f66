"""REST: approvals. A pending approval can be listed, read and answered (the API's one write)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from threads.api_errors import error_responses
from threads.api_query import ApiView, ListView, text_filter
from threads.elicitations import ElicitationInvalid, elicitation_check
from threads.locking import Contended
from threads.models import Approval
from threads.selectors import approval_get_visible, approval_list
from threads.waits import ApprovalAbandoned, wait_answer_for_operator

APPROVAL_ID = OpenApiParameter(
    "approval_id", str, OpenApiParameter.PATH, description="The approval's id (its AG-UI interrupt id)."
)


class ApprovalOutput(serializers.ModelSerializer[Approval]):
    threadId = serializers.CharField(source="run.thread.agui_thread_id", help_text="The AG-UI thread id.")
    runId = serializers.CharField(source="run.agui_run_id", help_text="The AG-UI run id that asked.")
    runUuid = serializers.UUIDField(source="run_id", help_text="The run's id in this API (/api/runs/<id>/).")
    toolCallId = serializers.CharField(source="tool_call_id")
    answeredBy = serializers.CharField(source="answered_by")
    requestedAt = serializers.DateTimeField(source="requested_at")
    expiresAt = serializers.DateTimeField(source="expires_at")
    answeredAt = serializers.DateTimeField(source="answered_at", allow_null=True)
    latencySeconds = serializers.FloatField(
        source="latency_seconds", allow_null=True, help_text="Seconds from the question to its answer."
    )

    class Meta:
        model = Approval
        fields = [
            "id",
            "threadId",
            "runId",
            "runUuid",
            "toolCallId",
            "tool",
            "arguments",
            "message",
            "elicitation",
            "decision",
            "reason",
            "always",
            "answeredBy",
            "requestedAt",
            "expiresAt",
            "answeredAt",
            "latencySeconds",
        ]


class ApprovalFilter(serializers.Serializer[dict[str, Any]]):
    pending = serializers.BooleanField(required=False, default=False, help_text="Only approvals still waiting.")
    thread = text_filter(max_length=200, help_text="Only those of this AG-UI thread id.")


@extend_schema(parameters=[ApprovalFilter], responses={200: ApprovalOutput(many=True), **error_responses(400, 404)})
class ApprovalList(ListView[Approval]):
    """GET /api/approvals/?pending=1&thread=<id>: approvals, newest first."""

    serializer_class = ApprovalOutput
    query_filter = ApprovalFilter

    def get_queryset(self) -> QuerySet[Approval]:
        query = self.query()
        return approval_list(user=self.request.user, pending=query["pending"], agui_thread_id=query.get("thread"))


@extend_schema(parameters=[APPROVAL_ID], responses={200: ApprovalOutput, **error_responses(404)})
class ApprovalDetail(ApiView):
    """GET /api/approvals/<id>/: one approval."""

    def get(self, request: Request, approval_id: str) -> Response:
        approval = approval_get_visible(user=request.user, approval_id=approval_id)
        if approval is None:
            raise NotFound("no such approval")
        return Response(ApprovalOutput(approval).data)


class AnswerInput(serializers.Serializer[dict[str, Any]]):
    approved = serializers.BooleanField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    always = serializers.BooleanField(
        required=False, default=False, help_text="Approve this kind of call for the rest of the thread's session."
    )


@extend_schema(
    parameters=[APPROVAL_ID],
    request=AnswerInput,
    responses={200: ApprovalOutput, **error_responses(400, 403, 404, 409, 503)},
)
class ApprovalAnswer(ApiView):
    """POST /api/approvals/<id>/answer {approved, reason?, always?}: the waiting run goes on. An MCP
    server's question (``elicitation`` set) is answered {action: accept|decline|cancel, content?}, the
    content checked against its schema (a 400 naming the field, nothing stored). Its
    thread's owner may answer, and staff with the change permission on approvals; other staff,
    who see every approval, get a 403 (threads/api_permissions.py)."""

    def post(self, request: Request, approval_id: str) -> Response:
        approval = approval_get_visible(user=request.user, approval_id=approval_id)
        if approval is None:
            raise NotFound("no such approval")
        self.check_object_permissions(request, approval)
        if approval.elicitation is not None:
            return self._answer_elicitation(request, approval)
        answer = AnswerInput(data=request.data)
        answer.is_valid(raise_exception=True)
        approved = answer.validated_data["approved"]
        decision = Approval.Decision.APPROVED if approved else Approval.Decision.DENIED
        always = approved and answer.validated_data["always"]
        return self._answered(request, approval, decision, answer.validated_data["reason"], always)

    def _answer_elicitation(self, request: Request, approval: Approval) -> Response:
        """An MCP server's question: ``{action, content?}``, the content checked against its schema."""
        data = request.data if isinstance(request.data, dict) else {}
        try:
            reply = elicitation_check(
                approval.elicitation or {}, str(data.get("action", "")), data.get("content"), field="content"
            )
        except ElicitationInvalid as exc:
            field = "action" if exc.field == "content.action" else exc.field
            return Response({"error": {"code": "invalid_input", "message": exc.message, "field": field}}, status=400)
        return self._answered(request, approval, Approval.Decision.APPROVED, reply.recorded(), False)

    def _answered(self, request: Request, approval: Approval, decision: str, reason: str, always: bool) -> Response:
        try:
            answered = wait_answer_for_operator(
                interrupt_id=approval.pk,
                decision=decision,
                reason=reason,
                always=always,
                answered_by=request.user.get_username(),
            )
        except ApprovalAbandoned as exc:
            return Response({"error": {"code": "run_gone", "message": str(exc)}}, status=status.HTTP_409_CONFLICT)
        except Contended:
            return Response(
                {"error": {"code": "retry", "message": "the answer could not be recorded in time; send it again"}},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": "1"},
            )
        if not answered:
            return Response(
                {"error": {"code": "already_answered", "message": f"the approval was already {approval.decision}"}},
                status=status.HTTP_409_CONFLICT,
            )
        approval.refresh_from_db()
        return Response(ApprovalOutput(approval).data)
