from __future__ import annotations

from django.contrib import admin
from django.db.models import Case, QuerySet, When
from django.http import HttpRequest

from threads.models import Approval, Message, Run, RunEvent, Session, Thread
from threads.services import LIVE_STATUSES, RunNotCancellable, approval_answer, run_cancel_request


class MessageInline(admin.TabularInline):
    model = Message
    fields = ("position", "role", "message_id", "body")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("position",)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class RunInline(admin.TabularInline):
    model = Run
    fields = ("agui_run_id", "status", "outcome", "started_at", "finished_at", "event_count")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ("agui_thread_id", "title", "agent", "owner", "updated_at")
    list_filter = ("agent",)
    list_select_related = ("agent", "owner")
    search_fields = ("agui_thread_id", "title")
    readonly_fields = ("agui_thread_id", "agent", "state", "created_at", "updated_at")
    inlines = [MessageInline, RunInline]


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("thread", "input_tokens", "output_tokens", "cache_read_tokens", "updated_at")
    list_select_related = ("thread",)
    readonly_fields = (
        "thread",
        "turns",
        "paused_reason",
        "approved_always",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    )
    fields = ("thread", "grounding_override", *readonly_fields[1:])


class RunEventInline(admin.TabularInline):
    model = RunEvent
    fields = ("seq", "type", "payload")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("seq",)
    max_num = 0


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("agui_run_id", "thread", "status", "outcome", "input_tokens", "output_tokens", "started_at")
    list_filter = ("status",)
    list_select_related = ("thread",)
    search_fields = ("agui_run_id", "thread__agui_thread_id")
    readonly_fields = [f.name for f in Run._meta.fields]
    inlines = [RunEventInline]
    actions = ["cancel_runs"]

    @admin.action(description="Cancel the selected running runs")
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        asked = 0
        for run in queryset.filter(status__in=LIVE_STATUSES):
            try:
                run_cancel_request(run_id=run.pk)
                asked += 1
            except RunNotCancellable:
                continue
        self.message_user(request, f"Asked {asked} run(s) to stop; each stops at its next safe point.")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).select_related("thread")


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin):
    """The queue of approvals: pending ones first; approve or deny from the list."""

    list_display = ("tool", "decision", "run", "requested_at", "expires_at", "answered_by", "latency")
    list_filter = ("decision", "tool")
    list_select_related = ("run",)
    search_fields = ("id", "tool", "tool_call_id", "run__agui_run_id")
    readonly_fields = [f.name for f in Approval._meta.fields]
    actions = ["approve", "deny"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Approval]:
        pending_first = Case(When(decision=Approval.Decision.PENDING, then=0), default=1)
        return super().get_queryset(request).order_by(pending_first, "-requested_at")

    @admin.display(description="latency (s)")
    def latency(self, approval: Approval) -> str:
        seconds = approval.latency_seconds
        return "" if seconds is None else f"{seconds:.1f}"

    def _answer(self, request: HttpRequest, queryset: QuerySet[Approval], approved: bool) -> None:
        who = request.user.get_username()
        decision = Approval.Decision.APPROVED if approved else Approval.Decision.DENIED
        reason = "" if approved else f"denied by {who} in the admin"
        answered = sum(
            approval_answer(interrupt_id=a.pk, decision=decision, reason=reason, answered_by=who)
            for a in queryset.filter(decision=Approval.Decision.PENDING)
        )
        self.message_user(request, f"Answered {answered} pending approval(s); their runs go on.")

    @admin.action(description="Approve the selected pending calls")
    def approve(self, request: HttpRequest, queryset: QuerySet[Approval]) -> None:
        self._answer(request, queryset, approved=True)

    @admin.action(description="Deny the selected pending calls")
    def deny(self, request: HttpRequest, queryset: QuerySet[Approval]) -> None:
        self._answer(request, queryset, approved=False)
