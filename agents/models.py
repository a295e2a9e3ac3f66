from __future__ import annotations

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models


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
    grounding_mode = models.CharField(max_length=16, choices=Grounding.choices, default=Grounding.OFF)
    max_iterations = models.PositiveIntegerField(default=50, validators=[MinValueValidator(1)])
    max_run_seconds = models.PositiveIntegerField(
        default=1800, help_text="Wall-clock cap of a run, in seconds; past it the run pauses. 0: no cap."
    )
    token_budget = models.PositiveIntegerField(
        default=0, help_text="Input plus output tokens a run may use before it pauses. 0: no budget."
    )
    max_tokens = models.PositiveIntegerField(
        default=8192, validators=[MinValueValidator(1)], help_text="Output tokens per model call."
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
