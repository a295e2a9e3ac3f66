from __future__ import annotations

import functools
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, get_script_prefix, get_urlconf, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from threads.admin import approvals  # noqa: F401  (registers the approvals' admin)
from threads.admin.board import board_liveness, thread_board
from threads.admin.display import ListCheckboxes, message_html, pretty_json, takeovers_html
from threads.admin.links import board_url, runs_url, timeline_url
from threads.admin.liveness import Liveness
from threads.admin.network import NetworkUseInline
from threads.admin.rows import SHAPE_PK, AppList
from threads.admin.timeline_reads import run_liveness, run_timeline
from threads.models import Message, QueuedMessage, Run, Session, SubAgentTask, Thread
from threads.selectors import THREAD_LIST_LEAVES_OUT, count_of
from threads.services.runs import LIVE_STATUSES, RunNotCancellable, run_cancel
from threads.services.workspaces import thread_delete
from threads.workspace_reads import workspace_info

TIMELINE_PAGE_SIZE = 200  # timeline entries (assembled messages, tool calls, ...) per page
LIVE_POLL_MILLISECONDS = 2000


def _poll_response(liveness: Liveness) -> JsonResponse:
    # admin_view marks it never-cache, so every poll reaches the server.
    return JsonResponse({"live": liveness.live, "version": liveness.version})


_PK = str(SHAPE_PK)


@functools.lru_cache(maxsize=16)
def _link_shapes(script_prefix: str, urlconf: str | None) -> tuple[str, str]:
    """The thread list's two links with the thread's pk left to fill in: reversing them for every
    row was a tenth of the list's time (100 rows), and the list is what an operator opens while
    replies stream (issue #27 item 5). Reversed once per script prefix and URLconf."""
    return runs_url(SHAPE_PK).removesuffix(_PK), board_url(SHAPE_PK)


class MessageInline(admin.TabularInline):
    """The thread's transcript, read-only and in order; a long thread shows its latest messages."""

    LATEST = 200

    model = Message
    fields = ("position", "role", "message")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = f"Messages (the latest {LATEST}, oldest first)"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Message]:
        # A filter rather than a slice: the inline formset filters the queryset again.
        nth_latest = (
            Message.objects.filter(thread=OuterRef("thread"))
            .order_by("-position")
            .values("position")[self.LATEST - 1 : self.LATEST]
        )
        latest = super().get_queryset(request).filter(position__gte=Coalesce(Subquery(nth_latest), 0))
        return latest.order_by("position")

    @admin.display(description="message")
    def message(self, obj: Message) -> SafeString:
        return message_html(obj.body)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Thread)
class ThreadAdmin(ListCheckboxes, AppList):
    change_form_template = "admin/threads/thread/change_form.html"
    list_display = (
        "agui_thread_id",
        "title",
        "archived",
        "agent",
        "owner",
        "message_count",
        "run_count",
        "subagent_count",
        "updated_at",
        "links",
    )
    list_filter = ("agent", "archived")
    list_select_related = ("agent", "owner")
    list_deferred = THREAD_LIST_LEAVES_OUT
    search_fields = ("agui_thread_id", "title")
    fields = (
        "agui_thread_id",
        "title",
        "archived",
        "agent",
        "owner",
        "created_at",
        "updated_at",
        "workspace",
        "related",
        "state_document",
    )
    readonly_fields = ("agui_thread_id", "agent", "created_at", "updated_at", "workspace", "related", "state_document")
    inlines = [MessageInline]

    @admin.display(description="workspace")
    def workspace(self, obj: Thread) -> str:
        info = workspace_info(obj)
        where = info.path or "the shared AGENT_WORKSPACE"
        if info.bytes is None:
            return f"{where} (not made yet)"
        made = f", made {info.created_at:%Y-%m-%d %H:%M}" if info.created_at else ""
        return f"{where}: {info.bytes:,} bytes{made}"

    def delete_model(self, request: HttpRequest, obj: Thread) -> None:
        thread_delete(thread=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Thread]) -> None:
        for thread in queryset:
            thread_delete(thread=thread)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Thread]:
        threads: QuerySet[Thread] = (
            super()
            .get_queryset(request)
            .annotate(
                message_total=count_of(Message, "thread"),
                run_total=count_of(Run, "thread"),
                subagent_total=count_of(SubAgentTask, "thread"),
            )
        )
        return threads

    @admin.display(description="messages", ordering="message_total")
    def message_count(self, obj: Any) -> int:
        return int(obj.message_total)

    @admin.display(description="runs", ordering="run_total")
    def run_count(self, obj: Any) -> int:
        return int(obj.run_total)

    @admin.display(description="sub-agents", ordering="subagent_total")
    def subagent_count(self, obj: Any) -> int:
        return int(obj.subagent_total)

    @admin.display(description="")
    def links(self, obj: Thread) -> SafeString:
        runs, board = _link_shapes(get_script_prefix(), get_urlconf())
        pk = str(obj.pk)  # a UUID: nothing in it to escape
        return mark_safe(f'<a href="{runs}{pk}">runs</a> · <a href="{board.replace(_PK, pk)}">sub-agents</a>')

    @admin.display(description="runs and sub-agents")
    def related(self, obj: Any) -> SafeString:
        return format_html(
            '<a href="{}">{} run(s)</a> · <a href="{}">sub-agent board ({} task(s))</a>',
            runs_url(obj.pk),
            obj.run_total,
            board_url(obj.pk),
            obj.subagent_total,
        )

    @admin.display(description="shared state")
    def state_document(self, obj: Thread) -> SafeString:
        return pretty_json(obj.state)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # threads are opened by AG-UI clients

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/subagents/", wrap(self.board_view), name="threads_thread_subagents"),
            path("<path:object_id>/subagents/poll/", wrap(self.board_poll), name="threads_thread_subagents_poll"),
            *super().get_urls(),
        ]

    def _thread(self, request: HttpRequest, object_id: str) -> Thread:
        thread: Thread | None = self.get_object(request, unquote(object_id))
        if thread is None:
            raise Http404("no such thread")
        if not self.has_view_permission(request, thread):
            raise PermissionDenied
        return thread

    def board_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The sub-agent board of one thread; it refreshes itself while the thread has live work."""
        thread = self._thread(request, object_id)
        board = thread_board(thread=thread)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Sub-agent board of {thread}",
            "thread": thread,
            "board": board,
            "runs_url": runs_url(thread.pk),
            "poll_url": reverse("admin:threads_thread_subagents_poll", args=[thread.pk]),
            "poll_ms": LIVE_POLL_MILLISECONDS,
        }
        return TemplateResponse(request, "admin/threads/thread/subagents.html", context)

    def board_poll(self, request: HttpRequest, object_id: str) -> JsonResponse:
        return _poll_response(board_liveness(thread=self._thread(request, object_id)))


@admin.register(Session)
class SessionAdmin(AppList):
    list_display = ("thread", "input_tokens", "output_tokens", "cache_read_tokens", "updated_at")
    list_select_related = ("thread",)
    list_deferred = ("turns", "approved_always", "thread__state")
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


@admin.register(Run)
class RunAdmin(ListCheckboxes, AppList):
    change_form_template = "admin/threads/run/change_form.html"
    list_display = (
        "agui_run_id",
        "thread",
        "status",
        "outcome",
        "event_count",
        "input_tokens",
        "output_tokens",
        "started_at",
        "timeline",
    )
    list_filter = ("status",)
    list_select_related = ("thread",)
    list_deferred = ("checkpoint", "client_answers", "error", "thread__state")
    search_fields = ("agui_run_id", "thread__agui_thread_id")
    # The history shown as a table (takeovers_shown) rather than as JSON.
    exclude = ("takeover_history",)
    readonly_fields = (
        "timeline",
        "takeovers_shown",
        *(f.name for f in Run._meta.fields if f.name != "takeover_history"),
    )
    inlines = [NetworkUseInline]
    actions = ["cancel_runs"]

    @admin.display(description="timeline")
    def timeline(self, obj: Run) -> SafeString:
        return format_html('<a href="{}">timeline</a>', timeline_url(obj.pk))

    @admin.display(description="takeovers and hand-overs")
    def takeovers_shown(self, obj: Run) -> SafeString:
        return takeovers_html(obj.takeover_history)

    @admin.action(description="Cancel the selected running runs", permissions=["change"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        asked = 0
        for run in queryset.filter(status__in=(*LIVE_STATUSES, Run.Status.WAITING)):
            try:
                run_cancel(run_id=run.pk)
                asked += 1
            except RunNotCancellable:
                continue
        self.message_user(request, f"Asked {asked} run(s) to stop; each stops at its next safe point.")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # runs are started by AG-UI requests

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("<path:object_id>/timeline/", wrap(self.timeline_view), name="threads_run_timeline"),
            path("<path:object_id>/timeline/poll/", wrap(self.timeline_poll), name="threads_run_timeline_poll"),
            *super().get_urls(),
        ]

    def _run(self, request: HttpRequest, object_id: str) -> Run:
        run: Run | None = self.get_object(request, unquote(object_id))
        if run is None:
            raise Http404("no such run")
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        return run

    def timeline_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The run's event log as a timeline, paginated; it refreshes itself while the run is live."""
        run = self._run(request, object_id)
        timeline = run_timeline(run=run)
        page = Paginator(timeline.entries, TIMELINE_PAGE_SIZE).get_page(request.GET.get("page"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Timeline of run {run.agui_run_id}",
            "run": run,
            "timeline": timeline,
            "page": page,
            "page_range": page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1),
            "runs_url": runs_url(run.thread_id),
            "board_url": board_url(run.thread_id),
            "poll_url": reverse("admin:threads_run_timeline_poll", args=[run.pk]),
            "poll_ms": LIVE_POLL_MILLISECONDS,
        }
        return TemplateResponse(request, "admin/threads/run/timeline.html", context)

    def timeline_poll(self, request: HttpRequest, object_id: str) -> JsonResponse:
        return _poll_response(run_liveness(run=self._run(request, object_id)))


@admin.register(SubAgentTask)
class SubAgentTaskAdmin(AppList):
    """The record of delegated work; it is written by the runs only, so the admin just reads it."""

    list_display = (
        "id",
        "thread",
        "role",
        "status",
        "depth",
        "model",
        "tool_call_count",
        "tokens",
        "started_at",
        "finished_at",
        "board",
    )
    list_filter = ("status", ("thread", admin.RelatedOnlyFieldListFilter))
    list_select_related = ("thread",)
    search_fields = ("id", "role", "prompt", "thread__agui_thread_id")
    readonly_fields = ("board", "tool_call_list")
    fieldsets = (
        (None, {"fields": ("id", "board", "thread", "run", "parent_task", "depth", "status", "conclusion")}),
        ("Task", {"fields": ("role", "prompt", "context", "system_prompt", "allowed_tools", "model")}),
        ("Outcome", {"fields": ("summary", "error", "tool_call_list", "iterations")}),
        (
            "Usage and time",
            {
                "fields": (
                    "input_tokens",
                    "output_tokens",
                    "cache_read_tokens",
                    "cache_write_tokens",
                    "started_at",
                    "finished_at",
                )
            },
        ),
    )

    @admin.display(description="tool calls")
    def tool_call_count(self, obj: SubAgentTask) -> int:
        return len(obj.tool_calls) if isinstance(obj.tool_calls, list) else 0

    @admin.display(description="tokens")
    def tokens(self, obj: SubAgentTask) -> int:
        return obj.input_tokens + obj.output_tokens

    @admin.display(description="board")
    def board(self, obj: SubAgentTask) -> SafeString:
        return format_html('<a href="{}#task-{}">sub-agent board</a>', board_url(obj.thread_id), obj.pk)

    @admin.display(description="tool calls")
    def tool_call_list(self, obj: SubAgentTask) -> SafeString:
        return pretty_json(obj.tool_calls)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(QueuedMessage)
class QueuedMessageAdmin(AppList):
    """Messages sent while a run was in flight: where each went (read into that run, or the run it
    started), for an operator asking why a message got its answer where it did. Read-only."""

    list_display = ("message_id", "thread", "status", "agui_run_id", "run", "queued_at", "taken_at")
    list_filter = ("status",)
    list_select_related = ("thread", "run")
    search_fields = ("thread__agui_thread_id", "message_id", "agui_run_id")
    fields = ("thread", "message_id", "body", "agui_run_id", "status", "run", "error", "queued_at", "taken_at")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
