"""The admin of the agents app: agents, the permission rules and the page that tries a tool call
against them. It lives here, not in agents/, because it is an HTTP surface and agents/ knows nothing
of HTTP; "project" is an installed app so that the admin finds this module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Max, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from agents import (
    admin_budgets,  # noqa: F401  (registers the budgets' and spend's admin)
    admin_mcp,  # noqa: F401  (registers the MCP servers' admin)
)
from agents.mcp.config import McpConfigError, file_servers
from agents.models import Agent, McpServerEntry, PermissionRule
from agents.permissions import Verdict, evaluate, memory_key, primary_argument, rules_for
from orchestrator.tools.catalog import KNOWN_TOOLS


def _mcp_server_choices(chosen: list[str]) -> list[tuple[str, str]]:
    """Every MCP server configured, labelled with where; a name ``chosen`` keeps that no longer is
    one stays listed (and checked), so the operator sees it rather than the agent silently widening."""
    try:
        labels = {server.name: "MCP_SERVERS file" for server in file_servers()}
    except McpConfigError:
        labels = {}
    for name, enabled in McpServerEntry.objects.values_list("name", "enabled"):
        labels.setdefault(name, "admin" if enabled else "admin, disabled")
    for name in chosen:
        labels.setdefault(name, "not configured")
    return [(name, f"{name} ({where})") for name, where in sorted(labels.items())]


class AgentForm(forms.ModelForm):
    mcp_servers = forms.MultipleChoiceField(
        label="MCP servers",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The servers whose tools this agent gets; none checked: every enabled server.",
    )

    class Meta:
        model = Agent
        fields = "__all__"
        widgets = {
            "description": forms.Textarea(attrs={"rows": 3, "cols": 100}),
            "system_prompt": forms.Textarea(attrs={"rows": 18, "cols": 100, "style": "font-family: monospace"}),
            "bash_allowed_hosts": forms.Textarea(attrs={"rows": 4, "cols": 60, "style": "font-family: monospace"}),
            "bash_denied_hosts": forms.Textarea(attrs={"rows": 4, "cols": 60, "style": "font-family: monospace"}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        chosen = self.instance.mcp_servers if isinstance(self.instance.mcp_servers, list) else []
        servers = self.fields["mcp_servers"]
        assert isinstance(servers, forms.MultipleChoiceField)
        servers.choices = _mcp_server_choices(chosen)


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = (
        "name",
        "model_name",
        "grounding_mode",
        "max_iterations",
        "max_run_seconds",
        "token_budget",
        "thinking_budget",
        "thread_count",
        "enabled",
        "updated_at",
    )
    list_filter = ("enabled", "grounding_mode")
    search_fields = ("name", "description")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "description", "enabled")}),
        (
            "Model",
            {
                "fields": ("model", "max_tokens", "thinking_budget"),
                "description": "Which model answers and how much it may write and think per call.",
            },
        ),
        (
            "System prompt",
            {
                "fields": ("system_prompt", "environment_block"),
                "description": (
                    "The environment block (date and time, OS, workspace, git branch and status) is appended "
                    "at the start of each run."
                ),
            },
        ),
        (
            "Grounding",
            {
                "fields": ("grounding_mode",),
                "description": (
                    "Off: every tool from the start. Prompt: the model is asked to understand the task first. "
                    "Enforced: only exploration tools (read-only ones, bash with its own approval, the web "
                    "tools, ask_user, todo_write) until the model reports its understanding "
                    "(a session can override this)."
                ),
            },
        ),
        (
            "MCP servers",
            {
                "fields": ("mcp_servers",),
                "description": "Tools from the operator's MCP servers (the MCP_SERVERS file and the admin's).",
            },
        ),
        (
            "Limits of a run",
            {
                "fields": ("max_iterations", "max_run_seconds", "token_budget"),
                "description": "A run that reaches a limit pauses, never lost: the thread can continue it.",
            },
        ),
        (
            "Budget",
            {
                "fields": ("budget_daily_usd", "budget_monthly_usd"),
                "description": (
                    "What this agent may spend, all users together, in US dollars at list prices per UTC day and "
                    "month. Blank: the BUDGET_AGENT_* settings. A run over a cap is refused (budget_exceeded)."
                ),
            },
        ),
        (
            "bash's network",
            {
                "fields": ("bash_allowed_hosts", "bash_denied_hosts"),
                "description": (
                    "With AGENT_BASH_NETWORK=allowlist, bash reaches the hosts of AGENT_BASH_ALLOWED_HOSTS and these, "
                    "and the hosts granted to a thread (request_network_access); the denied hosts here and in "
                    "AGENT_BASH_DENIED_HOSTS are never reached, whatever was granted."
                ),
            },
        ),
        ("History", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        # threads depends on agents, not the reverse: the count goes through the reverse relation.
        agents: QuerySet[Agent] = super().get_queryset(request).annotate(thread_total=Count("threads"))
        return agents

    @admin.display(description="model", ordering="model")
    def model_name(self, obj: Agent) -> str:
        return obj.model or f"(ANTHROPIC_MODEL: {settings.ANTHROPIC_MODEL})"

    @admin.display(description="threads", ordering="thread_total")
    def thread_count(self, obj: Any) -> SafeString:
        url = f"{reverse('admin:threads_thread_changelist')}?agent__id__exact={obj.pk}"
        return format_html('<a href="{}">{}</a>', url, obj.thread_total)


def _tool_choices() -> list[tuple[str, str]]:
    return [
        (name, f"{name} ({'network' if tool.network else 'read-only' if tool.read_only else 'not read-only'})")
        for name, tool in sorted(KNOWN_TOOLS.items())
    ]


class PermissionRuleForm(forms.ModelForm):
    tool = forms.ChoiceField(choices=[("", "Any tool"), *_tool_choices()], required=False, help_text="Blank: any tool.")

    class Meta:
        model = PermissionRule
        fields = "__all__"


class TryCallForm(forms.Form):
    """A tool call to evaluate against the rules, as the loop would."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.all(), to_field_name="name")
    thread = forms.CharField(required=False, help_text="AG-UI thread id; blank: no thread's own rules apply.")
    tool = forms.ChoiceField(choices=_tool_choices)
    arguments = forms.JSONField(
        required=False,
        initial={},
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
        help_text='The call\'s arguments as a JSON object, e.g. {"path": "src/app.py"} or {"command": "git status"}.',
    )
    remembered = forms.BooleanField(required=False, label="Approved always earlier in the session")
    auto_approve = forms.BooleanField(required=False, label="Auto-approve is on")

    def clean_arguments(self) -> dict[str, Any]:
        value = self.cleaned_data.get("arguments")
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ValidationError("The arguments are a JSON object, as the model sends them.")
        return value


@dataclass(slots=True, frozen=True)
class TriedCall:
    verdict: Verdict
    rules: list[PermissionRule]  # the rules in scope, in evaluation order
    targets: list[str]  # what the globs were matched against
    memory_key: str


def try_call(data: dict[str, Any]) -> TriedCall:
    tool = KNOWN_TOOLS[data["tool"]]
    rules = rules_for(data["agent"].name, data["thread"])
    verdict = evaluate(
        rules,
        tool=tool,
        arguments=data["arguments"],
        remembered=data["remembered"],
        auto_approve=data["auto_approve"],
        ask_a_person=settings.AGUI_HUMAN_IN_THE_LOOP,  # as the server would decide it
    )
    return TriedCall(
        verdict, rules, primary_argument(tool.name, data["arguments"]), memory_key(tool.name, data["arguments"])
    )


@admin.register(PermissionRule)
class PermissionRuleAdmin(admin.ModelAdmin):
    form = PermissionRuleForm
    change_list_template = "admin/agents/permissionrule/change_list.html"
    list_display = ("rule", "position", "scope", "target", "tool_name", "glob", "decision", "enabled", "description")
    list_display_links = ("rule",)
    list_editable = ("position", "decision", "enabled")
    list_filter = ("scope", "decision", "enabled", "agent")
    list_select_related = ("agent",)
    search_fields = ("match", "tool", "description", "thread_agui_id", "agent__name")
    ordering = ("position", "id")
    fieldsets = (
        (None, {"fields": ("position", "tool", "match", "decision", "enabled", "description")}),
        ("Scope", {"fields": ("scope", "agent", "thread_agui_id")}),
    )

    @admin.display(description="rule", ordering="id")
    def rule(self, obj: PermissionRule) -> str:
        return f"#{obj.pk}"

    @admin.display(description="agent or thread")
    def target(self, obj: PermissionRule) -> str:
        if obj.scope == PermissionRule.Scope.AGENT:
            return str(obj.agent)
        return obj.thread_agui_id or "—"

    @admin.display(description="tool", ordering="tool")
    def tool_name(self, obj: PermissionRule) -> str:
        return obj.tool or "any tool"

    @admin.display(description="match", ordering="match")
    def glob(self, obj: PermissionRule) -> str:
        return obj.match or "*"

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        # A new rule goes after the others unless the operator says otherwise.
        last = PermissionRule.objects.aggregate(last=Max("position"))["last"]
        return {"position": 10 if last is None else last + 10, **super().get_changeform_initial_data(request)}

    def get_urls(self) -> list[URLPattern]:
        opts = self.model._meta
        try_url = path(
            "try/",
            self.admin_site.admin_view(self.try_view),
            name=f"{opts.app_label}_{opts.model_name}_try",
        )
        return [try_url, *super().get_urls()]  # before the catch-all <object_id>/ of the change view

    def try_view(self, request: HttpRequest) -> HttpResponse:
        """Evaluates a tool call against the rules in scope and shows the verdict; it changes nothing."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = TryCallForm(request.GET if "tool" in request.GET else None)
        tried = try_call(form.cleaned_data) if form.is_bound and form.is_valid() else None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Try a tool call",
            "form": form,
            "tried": tried,
        }
        return TemplateResponse(request, "admin/agents/permissionrule/try.html", context)
