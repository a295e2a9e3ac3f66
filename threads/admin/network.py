"""bash's network use on a run's page (issue #47): each connection a command asked Threadline's
proxy for, allowed or refused and why, with its bytes each way. Read-only: the proxy writes them."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from threads.models import NetworkUse


class NetworkUseInline(admin.TabularInline):
    model = NetworkUse
    fields = ("tool_call_id", "host", "port", "allowed", "reason", "bytes_sent", "bytes_received", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name = "network connection of bash"
    verbose_name_plural = "bash's network use (connections through Threadline's proxy)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
