from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from agents.mcp.config import HTTP, STDIO, McpConfigError, ServerConfig, check_variables, file_servers, parse_server
from agents.mcp.names import is_mcp_name, is_tool_glob
from agents.mcp.sandboxing import McpNotConfined, shown_paths
from orchestrator.tools.catalog import KNOWN_TOOLS
from orchestrator.tools.egress import HostPattern, parse_host_patterns
from orchestrator.tools.targets import glob_error


def usd_cap(period: str, help_text: str) -> models.DecimalField[Decimal | None, Decimal | None]:
    """A spend cap in US dollars (blank: the setting's), for an agent or a user."""
    return models.DecimalField(
        f"{period} budget (USD)",
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=help_text,
    )


class Agent(models.Model):
    """An agent served at /agui/<name>: its model, its prompt and its limits."""

    class Grounding(models.TextChoices):
        OFF = "off", "Off"
        PROMPT = "prompt", "Prompt"
        ENFORCED = "enforced", "Enforced"

    name = models.CharField(
        max_length=64,
        unique=True,
        validators=[RegexValidator(r"^[a-z0-9][a-z0-9_-]*$", "Lower-case letters, digits, - and _ only.")],
    )
    description = models.TextField(blank=True)
    model = models.CharField(
        max_length=128, blank=True, help_text="Model id; blank uses ANTHROPIC_MODEL from the environment."
    )
    system_prompt = models.TextField(blank=True)
    # A chat agent reads the code before it acts, advised by its system prompt; "enforced"
    # would force the ritual on quick questions, "off" leaves the agent guessing where the code is.
    grounding_mode = models.CharField(
        max_length=16,
        choices=Grounding.choices,
        default=Grounding.PROMPT,
        help_text=(
            "off: no grounding protocol; prompt: the system prompt asks the agent to read the code before it "
            "acts (the default for agents people chat with); enforced: only exploration tools until "
            "it reports that it understood."
        ),
    )
    environment_block = models.BooleanField(
        default=True,
        help_text=(
            "Append the date and time, the OS, the workspace and its git branch and status to the system "
            "prompt of each run."
        ),
    )
    max_iterations = models.PositiveIntegerField(
        default=20, validators=[MinValueValidator(1)], help_text="Model calls per run; past it the run pauses."
    )
    max_run_seconds = models.PositiveIntegerField(
        default=1800, help_text="Wall-clock cap of a run, in seconds; past it the run pauses. 0: no cap."
    )
    token_budget = models.PositiveIntegerField(
        default=0, help_text="Input plus output tokens a run may use before it pauses. 0: no budget."
    )
    max_tokens = models.PositiveIntegerField(
        default=4096, validators=[MinValueValidator(1)], help_text="Output tokens per model call."
    )
    thinking_budget = models.PositiveIntegerField(
        default=0, help_text="Extended thinking budget in tokens per model call; 0 turns thinking off."
    )
    mcp_servers = models.JSONField(
        "MCP servers",
        default=list,
        blank=True,
        help_text="The MCP servers whose tools this agent gets, by name; none chosen: every enabled one.",
    )
    budget_daily_usd = usd_cap(
        "daily", "What this agent may spend a UTC day, all users together; blank: BUDGET_AGENT_DAILY_USD."
    )
    budget_monthly_usd = usd_cap(
        "monthly", "What this agent may spend a UTC month, all users together; blank: BUDGET_AGENT_MONTHLY_USD."
    )
    bash_allowed_hosts = models.TextField(
        "hosts bash may reach",
        blank=True,
        help_text=(
            "Hosts this agent's bash may reach through Threadline's proxy besides AGENT_BASH_ALLOWED_HOSTS, "
            "one a line or comma-separated: name, *.name or an IP address, each with an optional :port. "
            "Used with AGENT_BASH_NETWORK=allowlist; a 'yes, always' to request_network_access adds here."
        ),
    )
    bash_denied_hosts = models.TextField(
        "hosts bash may not reach",
        blank=True,
        help_text=(
            "Hosts this agent's bash may never reach, besides AGENT_BASH_DENIED_HOSTS (same form); "
            "the deny list wins over every allow list and every grant."
        ),
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def host_lists(self) -> tuple[tuple[HostPattern, ...], tuple[HostPattern, ...]]:
        """The agent's own allowed and denied hosts, parsed (``clean`` checked them)."""
        return _patterns(self.bash_allowed_hosts), _patterns(self.bash_denied_hosts)

    def clean(self) -> None:
        names = self.mcp_servers
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise ValidationError({"mcp_servers": "A list of MCP server names."})
        unknown = sorted(set(names) - mcp_server_names())
        if unknown:
            raise ValidationError({"mcp_servers": f"No MCP server is called {', '.join(map(repr, unknown))}."})
        for name in ("bash_allowed_hosts", "bash_denied_hosts"):
            try:
                _patterns(getattr(self, name))
            except ValueError as exc:
                raise ValidationError({name: str(exc)}) from exc


def _patterns(text: str) -> tuple[HostPattern, ...]:
    """A host list as the admin holds it: entries separated by commas or lines."""
    return parse_host_patterns(",".join(text.splitlines()))


def mcp_server_names() -> set[str]:
    """The names of every MCP server configured, in the MCP_SERVERS file or the admin, enabled or not."""
    try:
        in_file = {server.name for server in file_servers()}
    except McpConfigError:
        in_file = set()  # checked at start-up; the admin still names its own servers
    return in_file | set(McpServerEntry.objects.values_list("name", flat=True))


ADMIN_SOURCE = "the admin"


class McpServerEntry(models.Model):
    """An MCP server the admin holds: the fields of a ``.mcp.json`` entry (agents/mcp/config.py, which
    checks it), so a server moves between the file and the admin unchanged. ``${VAR}`` in its strings
    is expanded from the server process's environment when it starts, for the names MCP_ENV_ALLOWLIST
    lists only (any other is refused). The values of ``env`` and
    ``headers`` may be secrets: they are never shown back (the admin shows their keys only)."""

    class Transport(models.TextChoices):
        STDIO = STDIO, "stdio (a local process)"
        HTTP = HTTP, "http (streamable HTTP)"

    name = models.CharField(
        max_length=64,
        unique=True,
        help_text="1 to 64 letters, digits, _ or -, without __; its tools are mcp__<name>__<tool>.",
    )
    transport = models.CharField("type", max_length=8, choices=Transport.choices, default=Transport.STDIO)
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the program to run.")
    args = models.JSONField(default=list, blank=True, help_text="stdio: its arguments, a JSON list of strings.")
    env = models.JSONField(
        "environment",
        default=dict,
        blank=True,
        help_text="stdio: its environment (besides PATH, HOME and the locale), a JSON object of strings.",
    )
    cwd = models.CharField(
        "working directory",
        max_length=500,
        blank=True,
        help_text="stdio: where its code or package lives; it runs there and sees it read-only.",
    )
    paths = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "stdio: further paths of the host it sees besides the system's directories and its working directory, "
            'a JSON list of absolute paths, read-only, or read-write with ":rw" (["/srv/notes:rw"]). Never the data '
            "dir, the server's checkout, the workspaces or the database."
        ),
    )
    network = models.BooleanField(default=True, help_text="stdio: whether it may use the network.")
    workspace = models.BooleanField(
        default=False,
        help_text="stdio: whether it sees the shared workspace, read-write (AGENT_WORKSPACE_MODE=shared only).",
    )
    url = models.CharField("URL", max_length=2000, blank=True, help_text="http: the server's MCP endpoint.")
    headers = models.JSONField(default=dict, blank=True, help_text="http: request headers, a JSON object of strings.")
    enabled = models.BooleanField(default=True, help_text="A disabled server is kept but not started.")
    description = models.TextField(blank=True, help_text="For people; the model never sees it.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        verbose_name_plural = "MCP servers"

    def __str__(self) -> str:
        return self.name

    def as_entry(self) -> dict[str, Any]:
        """The server as a ``.mcp.json`` entry (with its secrets: never to be shown)."""
        entry: dict[str, Any] = {"type": self.transport, "enabled": self.enabled}
        if self.transport == STDIO:
            entry |= {"network": self.network, "workspace": self.workspace}
        for key in ("command", "args", "env", "cwd", "paths", "url", "headers", "description"):
            value = getattr(self, key)
            if value not in ("", [], {}, None):
                entry[key] = value
        return entry

    def as_config(self) -> ServerConfig:
        """The server as the pool starts it; raises ``McpConfigError`` as the file's entries do."""
        return parse_server(
            self.name, self.as_entry(), source=ADMIN_SOURCE, variables_allowed=tuple(settings.MCP_ENV_ALLOWLIST)
        )

    def clean(self) -> None:
        try:
            config = self.as_config()
            check_variables(config)
            in_file = {server.name for server in file_servers()}
        except McpConfigError as exc:
            raise ValidationError({_FORM_FIELDS.get(exc.field, exc.field) or "__all__": str(exc)}) from None
        if config.transport == STDIO and config.enabled and settings.MCP_SANDBOX == "on":
            # What it would be refused at its start (agents/mcp/sandboxing.py), said beside the field.
            try:
                shown_paths(config.expanded())
            except McpNotConfined as exc:
                raise ValidationError({exc.field or "__all__": f"It would not be started: {exc}."}) from None
        if self.name in in_file:
            raise ValidationError(
                {"name": f"The MCP_SERVERS file already has a server called {self.name!r}; choose another name."}
            )


# The .mcp.json key an McpConfigError names, as the model's field.
_FORM_FIELDS = {"type": "transport"}


class PermissionRule(models.Model):
    """One line of the permission policy: for calls of ``tool`` (or any tool) whose primary argument
    matches the glob ``match``, the decision is ``decision``. Rules are tried in ``position`` order and
    the first that matches decides; agents/permissions.py evaluates them, each tool says what its glob
    is matched against (orchestrator/tools/targets.py)."""

    class Decision(models.TextChoices):
        ALLOW = "allow", "Allow"
        ASK = "ask", "Ask"
        DENY = "deny", "Deny"

    class Scope(models.TextChoices):
        GLOBAL = "global", "Every agent"
        AGENT = "agent", "One agent"
        THREAD = "thread", "One thread"

    position = models.PositiveIntegerField(
        help_text="Rules are tried from the lowest position up; the first match decides."
    )
    tool = models.CharField(max_length=64, blank=True, help_text="Blank: any tool.")
    match = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "A glob over the call's primary argument: the path for file tools (** crosses directories, "
            "{a,b} alternates), the command for bash. Blank, * or ** match anything."
        ),
    )
    decision = models.CharField(max_length=8, choices=Decision.choices)
    enabled = models.BooleanField(default=True)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.GLOBAL)
    agent = models.ForeignKey(
        Agent,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="permission_rules",
        help_text="The agent of a rule scoped to one agent.",
    )
    # The AG-UI thread id rather than a key to threads.Thread: threads depends on agents, not the reverse.
    thread_agui_id = models.CharField(
        "thread id", max_length=200, blank=True, help_text="The AG-UI thread id of a rule scoped to one thread."
    )
    description = models.TextField(blank=True, help_text="Why the rule exists.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "id"]
        indexes = [
            models.Index(fields=["position", "id"], name="permissionrule_order"),
            models.Index(fields=["thread_agui_id"], name="permissionrule_thread"),
        ]
        constraints = [
            # The same invariant as clean(), for writes that do not go through a form.
            models.CheckConstraint(
                condition=(
                    models.Q(scope="global", agent__isnull=True, thread_agui_id="")
                    | models.Q(scope="agent", agent__isnull=False, thread_agui_id="")
                    | (models.Q(scope="thread", agent__isnull=True) & ~models.Q(thread_agui_id=""))
                ),
                name="permissionrule_scope_target",
                violation_error_message="The scope and its agent or thread id disagree.",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.decision} {self.tool or 'any tool'} `{self.match or '*'}`"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.scope == self.Scope.AGENT and self.agent_id is None:
            errors["agent"] = "A rule scoped to one agent needs that agent."
        if self.scope != self.Scope.AGENT and self.agent_id is not None:
            errors["agent"] = "Only a rule scoped to one agent names an agent."
        if self.scope == self.Scope.THREAD and not self.thread_agui_id:
            errors["thread_agui_id"] = "A rule scoped to one thread needs its thread id."
        if self.scope != self.Scope.THREAD and self.thread_agui_id:
            errors["thread_agui_id"] = "Only a rule scoped to one thread names a thread."
        if self.tool and (problem := tool_error(self.tool)) is not None:
            errors["tool"] = problem
        if (problem := glob_error(self.match)) is not None:
            errors["match"] = problem
        if errors:
            raise ValidationError(errors)


def tool_error(tool: str) -> str | None:
    """Why ``tool`` cannot be a rule's tool, or None: a built-in tool's name, an MCP tool's name
    (``mcp__<server>__<tool>``, whose server may not be running yet) or a glob over names."""
    if tool in KNOWN_TOOLS or (is_mcp_name(tool) and not is_tool_glob(tool)):
        return None
    if is_tool_glob(tool):
        return glob_error(tool)
    return f"No tool is called {tool!r}; known: {', '.join(sorted(KNOWN_TOOLS))}, mcp__<server>__<tool>, or a glob."


class UserBudget(models.Model):
    """One user's own spend caps, overriding BUDGET_USER_DAILY_USD and BUDGET_USER_MONTHLY_USD."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget")
    daily_usd = usd_cap("daily", "What this user may spend a UTC day; blank: BUDGET_USER_DAILY_USD.")
    monthly_usd = usd_cap("monthly", "What this user may spend a UTC month; blank: BUDGET_USER_MONTHLY_USD.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "user budget"

    def __str__(self) -> str:
        return f"budget of {self.user}"


class DailySpend(models.Model):
    """What one user (none: the shared AGUI_TOKEN) spent with one agent on one UTC day, added to on
    every settle of a run's spend (threads/services/spending.py): a cap's check sums at most a month of these
    rows for one user or one agent, through the two indexes, whatever the number of runs."""

    day = models.DateField()
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="spend"
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="spend")
    cost_usd = models.FloatField(default=0.0)
    calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-day"]
        verbose_name = "daily spend"
        verbose_name_plural = "daily spend"
        indexes = [
            models.Index(fields=["user", "day"], name="dailyspend_user_day"),
            models.Index(fields=["agent", "day"], name="dailyspend_agent_day"),
            models.Index(fields=["day"], name="dailyspend_day"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.user or 'shared token'} {self.agent_id}: ${self.cost_usd:.2f}"
