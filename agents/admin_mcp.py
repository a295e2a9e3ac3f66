"""The admin of MCP servers (issue #26): the admin's own, editable, and the MCP_SERVERS file's, read-only,
each with its status in this process (up or down, its tools, its last error) read from the pool.

The values of a server's ``env`` and ``headers`` may be secrets: no page shows them back. The list
shows their keys; the form shows each key with a blank value, and a value left blank keeps the one
stored (so an operator changes one header without retyping the others). A server's last error is
shown with those values redacted (agents/mcp/redaction.py), and to superusers only: it is the
server's own words, or its stderr, and may carry what redaction cannot know (issue #49 item 2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from agents.mcp.config import ENTRY_KEYS, McpConfigError, ServerConfig, file_servers
from agents.mcp.pool import ServerStatus, server_statuses
from agents.models import McpServerEntry
from agents.services import (
    SUPERUSER_ONLY,
    McpServerFields,
    agents_naming,
    in_use_message,
    may_edit_mcp_servers,
    mcp_server_create,
    mcp_server_delete,
    mcp_server_update,
)


class SecretValuesField(forms.JSONField):
    """A JSON object of strings whose values are never rendered: each key is shown with "" (a stored
    value left "" is kept, see ``McpServerForm``)."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, dict):
            value = {key: "" for key in value}
        return super().prepare_value(value)


def keep_stored(new: Any, stored: dict[str, str]) -> Any:
    """``new``, with each value left "" replaced by the one stored under its key."""
    if not isinstance(new, dict):
        return new  # the model's check names the problem
    return {key: stored.get(key, "") if value == "" else value for key, value in new.items()}


class McpServerForm(forms.ModelForm):
    env = SecretValuesField(
        label="environment",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "style": "font-family: monospace"}),
        help_text=(
            'stdio: its environment, a JSON object of strings ({"TOKEN": "${GITHUB_TOKEN}"}), besides PATH, '
            'HOME and the locale. Stored values are never shown: "" keeps the stored value, a key removed is '
            "dropped. ${VAR} is expanded from the server process's environment for the names "
            "MCP_ENV_ALLOWLIST lists, and refused for any other."
        ),
    )
    headers = SecretValuesField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "style": "font-family: monospace"}),
        help_text=(
            'http: request headers, a JSON object of strings ({"Authorization": "Bearer ${DOCS_KEY}"}). '
            'Stored values are never shown: "" keeps the stored value, a key removed is dropped. ${VAR} as '
            "in the environment."
        ),
    )

    class Meta:
        model = McpServerEntry
        fields = ("name", "transport", *ENTRY_KEYS)
        widgets = {
            "args": forms.Textarea(attrs={"rows": 2, "cols": 80, "style": "font-family: monospace"}),
            "paths": forms.Textarea(attrs={"rows": 2, "cols": 80, "style": "font-family: monospace"}),
            "description": forms.Textarea(attrs={"rows": 2, "cols": 80}),
        }

    def clean_env(self) -> Any:
        return keep_stored(self.cleaned_data.get("env") or {}, self.instance.env if self.instance.pk else {})

    def clean_headers(self) -> Any:
        return keep_stored(self.cleaned_data.get("headers") or {}, self.instance.headers if self.instance.pk else {})

    def clean_args(self) -> Any:
        return self.cleaned_data.get("args") or []

    def clean_paths(self) -> Any:
        return self.cleaned_data.get("paths") or []

    def fields_for_service(self) -> McpServerFields:
        data = self.cleaned_data
        return McpServerFields(
            name=data["name"],
            transport=data["transport"],
            command=data["command"],
            args=data["args"],
            env=data["env"],
            cwd=data["cwd"],
            paths=data["paths"],
            network=data["network"],
            workspace=data["workspace"],
            url=data["url"],
            headers=data["headers"],
            enabled=data["enabled"],
            description=data["description"],
        )


@dataclass(slots=True, frozen=True)
class ServerView:
    """A server as the admin shows it: never a value of its env or headers."""

    name: str
    transport: str
    enabled: bool
    state: str
    tools: tuple[str, ...]
    last_error: str
    env_keys: str
    header_keys: str
    restarts: int


def server_view(config: ServerConfig, statuses: dict[str, ServerStatus]) -> ServerView:
    status = statuses.get(config.name)
    if status is not None and status.source != config.source:
        status = None  # the pool runs another server of that name (the file's, over the admin's)
    if not config.enabled:
        state = "disabled"
    elif status is None:
        state = "not started (it starts with the next run)"
    else:
        state = status.state
    return ServerView(
        name=config.name,
        transport=config.transport,
        enabled=config.enabled,
        state=state,
        tools=status.tools if status else (),
        last_error=status.last_error if status else "",
        env_keys=", ".join(key for key, _ in config.env),
        header_keys=", ".join(key for key, _ in config.headers),
        restarts=status.restarts if status else 0,
    )


def entry_view(entry: McpServerEntry, statuses: dict[str, ServerStatus]) -> ServerView:
    try:
        config = entry.as_config()
    except McpConfigError as exc:
        return ServerView(entry.name, entry.transport, entry.enabled, "invalid", (), str(exc), "", "", 0)
    return server_view(config, statuses)


def sees_errors(request: HttpRequest) -> bool:
    """Whether ``request``'s user is shown a server's errors: superusers only."""
    return bool(getattr(request.user, "is_superuser", False))


@admin.register(McpServerEntry)
class McpServerAdmin(admin.ModelAdmin):
    form = McpServerForm
    change_list_template = "admin/agents/mcpserverentry/change_list.html"
    list_display = ("name", "transport", "enabled", "status", "tool_count", "last_error", "env_keys", "header_keys")
    list_filter = ("enabled", "transport")
    search_fields = ("name", "description")
    readonly_fields = ("status", "tool_list", "last_error", "created_at", "updated_at")
    _STATUS = ("Status in this server process", {"fields": ("status", "tool_list", "last_error")})
    _STATUS_WITHOUT_ERROR = ("Status in this server process", {"fields": ("status", "tool_list")})

    # Adding, changing or deleting a server runs a command on the server (issue #46, item 4): a
    # superuser's act, whatever permissions a staff user was given; the services check it again.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return may_edit_mcp_servers(request.user) and super().has_add_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return may_edit_mcp_servers(request.user) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return may_edit_mcp_servers(request.user) and super().has_delete_permission(request, obj)

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = super().get_list_display(request)
        return shown if sees_errors(request) else tuple(field for field in shown if field != "last_error")

    def get_fieldsets(self, request: HttpRequest, obj: Model | None = None) -> Any:
        secrets: tuple[str, ...] = ("env", "headers")
        if obj is not None and not self.has_change_permission(request, obj):
            secrets = ("env_keys", "header_keys")  # a read-only page would show the values
        fieldsets: list[Any] = [
            (None, {"fields": ("name", "transport", "enabled", "description"), "description": SUPERUSER_ONLY}),
            ("stdio", {"fields": ("command", "args", secrets[0], "cwd", "paths", "network", "workspace")}),
            ("http", {"fields": ("url", secrets[1])}),
        ]
        if obj is not None:
            status = self._STATUS if sees_errors(request) else self._STATUS_WITHOUT_ERROR
            fieldsets += [status, ("History", {"fields": ("created_at", "updated_at"), "classes": ("collapse",)})]
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        fields = (*self.readonly_fields, "env_keys", "header_keys")
        return fields if sees_errors(request) else tuple(field for field in fields if field != "last_error")

    def _view(self, obj: McpServerEntry) -> ServerView:
        # Read afresh for each column: the pool is in memory, and the admin instance is shared by
        # every request, so it keeps nothing of one.
        return entry_view(obj, server_statuses())

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        statuses = server_statuses()
        try:
            from_file = [server_view(config, statuses) for config in file_servers()]
            file_error = ""
        except McpConfigError as exc:
            from_file, file_error = [], str(exc)
        context = {
            "file_servers": from_file,
            "file_error": file_error,
            "show_errors": sees_errors(request),
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    @admin.display(description="status")
    def status(self, obj: McpServerEntry) -> str:
        view = self._view(obj)
        return f"{view.state} (restarted {view.restarts} times)" if view.restarts else view.state

    @admin.display(description="tools")
    def tool_count(self, obj: McpServerEntry) -> int:
        return len(self._view(obj).tools)

    @admin.display(description="tools")
    def tool_list(self, obj: McpServerEntry) -> SafeString:
        tools = self._view(obj).tools
        if not tools:
            return format_html("{}", "none (it is not up)")
        return format_html_join(format_html("<br>"), "<code>{}</code>", ((name,) for name in tools))

    @admin.display(description="last error")
    def last_error(self, obj: McpServerEntry) -> str:
        return self._view(obj).last_error

    @admin.display(description="environment (keys)")
    def env_keys(self, obj: McpServerEntry) -> str:
        return ", ".join(obj.env) if isinstance(obj.env, dict) else ""

    @admin.display(description="headers (keys)")
    def header_keys(self, obj: McpServerEntry) -> str:
        return ", ".join(obj.headers) if isinstance(obj.headers, dict) else ""

    def save_model(self, request: HttpRequest, obj: McpServerEntry, form: Any, change: bool) -> None:
        fields = form.fields_for_service()
        if change:
            mcp_server_update(server=obj, by=request.user, **fields)
        else:
            created = mcp_server_create(by=request.user, **fields)
            obj.pk, obj._state.adding = created.pk, False

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        # The confirmation page refuses, naming the agents, as mcp_server_delete would.
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        for server in objs:
            naming = agents_naming(server.name)
            if naming:
                protected = [*protected, in_use_message(server.name, naming)]
        return deleted, counts, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: McpServerEntry) -> None:
        mcp_server_delete(server=obj, by=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServerEntry]) -> None:
        for server in queryset:
            mcp_server_delete(server=server, by=request.user)
