from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from threads.models import Message, Run, RunEvent, Session, Thread


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
    readonly_fields = ("thread", "turns", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


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

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return super().get_queryset(request).select_related("thread")
