"""The admin of spend caps and spend (issue #48): each user's caps, and what was spent, by day."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from agents.models import DailySpend, UserBudget


@admin.register(UserBudget)
class UserBudgetAdmin(admin.ModelAdmin):
    """A user's own caps; a user without one has the BUDGET_USER_* settings'. The shared AGUI_TOKEN is
    one user with the settings' caps."""

    list_display = ("user", "daily_usd", "monthly_usd", "updated_at")
    search_fields = ("user__username", "user__email")
    autocomplete_fields = ("user",)
    readonly_fields = ("updated_at",)


@admin.register(DailySpend)
class DailySpendAdmin(admin.ModelAdmin):
    """What each user spent with each agent a UTC day, as runs recorded it: read-only."""

    list_display = ("day", "payer", "agent", "cost_usd", "calls", "input_tokens", "cache_read_tokens", "output_tokens")
    list_filter = ("day", "agent")
    search_fields = ("user__username",)
    list_select_related = ("user", "agent")
    date_hierarchy = "day"

    @admin.display(description="user", ordering="user__username")
    def payer(self, row: DailySpend) -> str:
        return str(row.user) if row.user_id is not None else "the shared token"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
