"""The admin of approvals: a person answers pending ones here, alone or many at once."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Case, QuerySet, When
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from threads.admin.elicitations import FIELDS, ElicitationAnswerForm, asked_by
from threads.admin.links import timeline_url
from threads.admin.rows import AppList
from threads.locking import Contended
from threads.models import Approval
from threads.waits import ABANDONED, ApprovalAbandoned, wait_answer_for_operator


class AskedFilter(admin.SimpleListFilter):
    """Approvals, the agent's questions, and MCP servers' questions (elicitations), apart."""

    title = "asked"
    parameter_name = "asked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("approval", "approvals"), ("question", "the agent's questions"), ("mcp", "MCP servers' questions")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Approval]) -> QuerySet[Approval]:
        value = self.value()
        if value == "mcp":
            return queryset.filter(elicitation__isnull=False)
        if value == "question":
            return queryset.filter(pk__startswith="question_")
        if value == "approval":
            return queryset.filter(elicitation__isnull=True).exclude(pk__startswith="question_")
        return queryset


@admin.register(Approval)
class ApprovalAdmin(AppList):
    """The queue of approvals: pending ones first; approve or deny from the list."""

    list_display = (
        "tool",
        "asked",
        "call",
        "decision",
        "thread",
        "run_link",
        "requested_at",
        "expires_at",
        "answered_by",
        "latency",
    )
    list_filter = ("decision", AskedFilter, "tool")
    list_select_related = ("run__thread",)
    search_fields = ("id", "tool", "tool_call_id", "run__agui_run_id")
    readonly_fields = [f.name for f in Approval._meta.fields]
    actions = ["approve", "deny"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Approval]:
        pending_first = Case(When(decision=Approval.Decision.PENDING, then=0), default=1)
        return super().get_queryset(request).order_by(pending_first, "-requested_at")

    @admin.display(description="thread", ordering="run__thread__agui_thread_id")
    def thread(self, approval: Approval) -> str:
        return str(approval.run.thread)

    @admin.display(description="run", ordering="run__agui_run_id")
    def run_link(self, approval: Approval) -> SafeString:
        return format_html('<a href="{}">{}</a>', timeline_url(approval.run_id), approval.run.agui_run_id)

    @admin.display(description="asked")
    def asked(self, approval: Approval) -> str:
        if approval.elicitation is not None:
            return f"MCP question ({approval.elicitation.get('server')})"
        return "question" if approval.pk.startswith("question_") else "approval"

    @admin.display(description="call")
    def call(self, approval: Approval) -> SafeString:
        if approval.elicitation is not None:
            return asked_by(approval)
        # The text the chat's prompt shows (orchestrator/approval_text.py), lines kept.
        return format_html('<div style="white-space: pre-wrap">{}</div>', approval.message)

    def _answerable(self, approval: Approval | None) -> bool:
        return approval is not None and approval.elicitation is not None and approval.decision == "pending"

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if self._answerable(obj):
            kwargs["form"] = ElicitationAnswerForm
            kwargs["fields"] = list(FIELDS)
        return super().get_form(request, obj, change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = [f.name for f in Approval._meta.fields]
        return [*FIELDS, *fields] if self._answerable(obj) else fields

    def save_model(self, request: HttpRequest, obj: Approval, form: Any, change: bool) -> None:
        """An MCP question answered on its page; nothing else on an approval's page is saved."""
        if not isinstance(form, ElicitationAnswerForm):
            return
        try:
            wait_answer_for_operator(
                interrupt_id=obj.pk,
                decision=Approval.Decision.APPROVED,
                reason=form.reply.recorded(),
                answered_by=request.user.get_username(),
            )
        except ApprovalAbandoned:
            self.message_user(request, f"Not answered: {ABANDONED}.", level=messages.WARNING)

    @admin.display(description="latency (s)")
    def latency(self, approval: Approval) -> str:
        seconds = approval.latency_seconds
        return "" if seconds is None else f"{seconds:.1f}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # approvals are asked by runs

    def _answer(self, request: HttpRequest, queryset: QuerySet[Approval], approved: bool) -> None:
        who = request.user.get_username()
        decision = Approval.Decision.APPROVED if approved else Approval.Decision.DENIED
        reason = "" if approved else f"denied by {who} in the admin"
        answered = gone = contended = 0
        # An MCP server's question is answered on its own page (it may want content), not approved.
        for pending in queryset.filter(decision=Approval.Decision.PENDING, elicitation__isnull=True):
            try:
                answered += wait_answer_for_operator(
                    interrupt_id=pending.pk, decision=decision, reason=reason, answered_by=who
                )
            except ApprovalAbandoned:
                gone += 1
            except Contended:
                contended += 1
        self.message_user(request, f"Answered {answered} pending approval(s); their runs go on.")
        if gone:
            self.message_user(
                request,
                f"{gone} approval(s) were closed instead: {ABANDONED}.",
                level=messages.WARNING,
            )
        if contended:
            self.message_user(
                request,
                f"{contended} approval(s) could not be recorded in time (the database was busy); answer them again.",
                level=messages.WARNING,
            )

    @admin.action(description="Approve the selected pending calls", permissions=["change"])
    def approve(self, request: HttpRequest, queryset: QuerySet[Approval]) -> None:
        self._answer(request, queryset, approved=True)

    @admin.action(description="Deny the selected pending calls", permissions=["change"])
    def deny(self, request: HttpRequest, queryset: QuerySet[Approval]) -> None:
        self._answer(request, queryset, approved=False)
