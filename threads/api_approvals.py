"""The REST API's approvals: a pending approval can be read and answered (the one write).

One view class per operation, each with its own small serializers. Token
authentication (per-user tokens, separate from the AG-UI token); staff see and
answer every approval, other users those of their own threads.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers, status
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from threads.models import Approval
from threads.services import approval_answer


def _visible_approvals(request: Request) -> QuerySet[Approval]:
    approvals = Approval.objects.select_related("run__thread")
    if request.user.is_staff:
        return approvals
    return approvals.filter(run__thread__owner_id=request.user.pk)


class ApprovalOutput(serializers.ModelSerializer[Approval]):
    runId = serializers.CharField(source="run.agui_run_id")
    threadId = serializers.CharField(source="run.thread.agui_thread_id")

    class Meta:
        model = Approval
        fields = [
            "id",
            "threadId",
            "runId",
            "tool_call_id",
            "tool",
            "arguments",
            "message",
            "decision",
            "reason",
            "always",
            "answered_by",
            "requested_at",
            "expires_at",
            "answered_at",
        ]


class ApprovalList(APIView):
    """GET /api/approvals/?pending=1: approvals, newest first."""

    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]

    def get(self, request: Request) -> Response:
        approvals = _visible_approvals(request).order_by("-requested_at")
        if request.query_params.get("pending") in ("1", "true"):
            approvals = approvals.filter(decision=Approval.Decision.PENDING)
        return Response(ApprovalOutput(approvals[:200], many=True).data)


class AnswerInput(serializers.Serializer[dict[str, Any]]):
    approved = serializers.BooleanField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
    always = serializers.BooleanField(required=False, default=False)


class ApprovalAnswer(APIView):
    """POST /api/approvals/<id>/answer {approved, reason?, always?}: the waiting run goes on."""

    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]

    def post(self, request: Request, approval_id: str) -> Response:
        approval = _visible_approvals(request).filter(pk=approval_id).first()
        if approval is None:
            raise NotFound("no such approval")
        answer = AnswerInput(data=request.data)
        answer.is_valid(raise_exception=True)
        approved = answer.validated_data["approved"]
        answered = approval_answer(
            interrupt_id=approval.pk,
            decision=Approval.Decision.APPROVED if approved else Approval.Decision.DENIED,
            reason=answer.validated_data["reason"],
            always=approved and answer.validated_data["always"],
            answered_by=request.user.get_username(),
        )
        if not answered:
            return Response(
                {"error": {"code": "already_answered", "message": f"the approval was already {approval.decision}"}},
                status=status.HTTP_409_CONFLICT,
            )
        approval.refresh_from_db()
        return Response(ApprovalOutput(approval).data)
