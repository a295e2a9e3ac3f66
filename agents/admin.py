from django.contrib import admin

from agents.models import Agent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "model", "grounding_mode", "max_iterations", "thinking_budget", "enabled", "updated_at")
    list_filter = ("enabled", "grounding_mode")
    search_fields = ("name", "description")
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled")}),
        ("Model", {"fields": ("model", "system_prompt", "max_tokens", "thinking_budget")}),
        ("Limits and grounding", {"fields": ("max_iterations", "max_run_seconds", "token_budget", "grounding_mode")}),
    )
