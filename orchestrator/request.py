"""What starts a run: the runtime's request contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.events import RunListener
from orchestrator.tools.base import Tool


@dataclass(slots=True, frozen=True)
class Scenario:
    """Decides memory and which tools a run is offered."""

    name: str
    conversation_memory: bool = True
    # Tools that change the workspace; a scenario with nobody to approve them
    # denies them unless a rule allows them (rules come with the approvals).
    mutating_tools: bool = True
    denied_tools: frozenset[str] = frozenset()

    def offers(self, tool: Tool) -> bool:
        if tool.name in self.denied_tools:
            return False
        return tool.read_only or self.mutating_tools


INTERACTIVE = Scenario("interactive")
# A chat where nobody answers questions (AGUI_HUMAN_IN_THE_LOOP=off): the agent is not offered ask_user.
UNATTENDED = Scenario("unattended", denied_tools=frozenset({"ask_user"}))
# Scheduled or triggered runs: no approver is watching, and each starts from nothing.
BACKGROUND = Scenario("background", conversation_memory=False, mutating_tools=False)
# A child run working for a parent (the sub_agent tool): its own memory, and nobody to put questions to.
DELEGATION = Scenario("delegation", conversation_memory=False, denied_tools=frozenset({"ask_user"}))


@dataclass(slots=True, frozen=True)
class Image:
    media_type: str
    data: str = ""  # base64
    url: str = ""


@dataclass(slots=True)
class RunRequest:
    request_id: str  # what a cancel names
    text: str
    scenario: Scenario = INTERACTIVE
    parent_request_id: str = ""
    description: str = ""
    user_id: str = ""  # the owner of the thread, when a user's own token started it
    prompt_variables: dict[str, str] = field(default_factory=dict)
    images: list[Image] = field(default_factory=list)
    # Other content blocks of the user's message, already in the model's shape
    # (documents, say), kept rather than dropped.
    extra_content: list[dict[str, Any]] = field(default_factory=list)
    listeners: list[RunListener] = field(default_factory=list)
    # The message as the model reads it, when it was built earlier (a queued message that starts
    # the next run, orchestrator/queued.py); it stands for text, images and extra_content.
    content: str | list[dict[str, Any]] | None = None

    def has_message(self) -> bool:
        """False for a request that only carries answers (a resume) and nothing new to say."""
        return bool(self.text or self.images or self.extra_content or self.content)

    def user_content(self) -> str | list[dict[str, Any]]:
        if self.content is not None:
            return self.content
        if not self.images and not self.extra_content:
            return self.text
        blocks: list[dict[str, Any]] = []
        for image in self.images:
            if image.data:
                blocks.append(
                    {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}
                )
            else:
                blocks.append({"type": "image", "source": {"type": "url", "url": image.url}})
        blocks.extend(self.extra_content)
        if self.text:
            blocks.append({"type": "text", "text": self.text})
        return blocks


def render_prompt(template: str, variables: dict[str, str]) -> str:
    """The system prompt with ``{{name}}`` placeholders filled from the request's prompt variables;
    unknown placeholders are left as they are."""
    for name, value in variables.items():
        template = template.replace("{{" + name + "}}", value)
    return template
