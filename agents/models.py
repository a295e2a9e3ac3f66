from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from agents.mcp.names import is_mcp_name, is_tool_glob
from agents.tools.catalog import KNOWN_TOOLS
from agents.tools.targets import glob_error


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
    # seeds/003: a chat agent reads the code before it acts, advised by its system prompt; "enforced"
    # would force the ritual on quick questions, "off" leaves the agent guessing where the code is.
    grounding_mode = models.CharField(
        max_length=16,
        choices=Grounding.choices,
        default=Grounding.PROMPT,
        help_text=(
            "off: no grounding protocol; prompt: the system prompt asks the agent to read the code before it "
            "acts (the default, as seeds/003 has it for chat agents); enforced: only exploration tools until "
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
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class PermissionRule(models.Model):
    """One line of the permission policy: for calls of ``tool`` (or any tool) whose primary argument
    matches the glob ``match``, the decision is ``decision``. Rules are tried in ``position`` order and
    the first that matches decides; agents/permissions.py evaluates them, each tool says what its glob
    is matched against (agents/tools/targets.py)."""

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
