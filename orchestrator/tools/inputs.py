"""A tool that needs the person in the middle of its call: an MCP server's elicitation.

The call does not stay in flight while the person thinks (that could be days, on another process):
the tool returns ``ToolOutput.needs_input``, the run waits on it like on an approval
(orchestrator/waits.py, ``WaitKind.INPUT``), and once it is answered the call is made again with
every answer given so far (``CallInputs``). An MCP server on the 2026-07-28 revision gets them as
the retried call's ``inputResponses`` with its ``requestState``; one on an older revision asks
again during the new call and is given the stored answer instead of a new question.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

FORM = "form"
URL = "url"
ACTIONS = ("accept", "decline", "cancel")
# How many questions one call may ask before it is given up: the MCP SDKs' bound on input rounds.
MAX_ROUNDS = 10


@dataclass(slots=True, frozen=True)
class InputRequest:
    """What a tool asks the person while its call is in flight. ``mode`` is ``form`` (the answer's
    content must match ``schema``) or ``url`` (the person opens ``url``, on ``domain``, and says
    when done). ``key`` and ``state`` are the 2026-07-28 revision's: the server's key for the
    question and the opaque state its retried call must echo. ``given``: the answers this call
    had before it asked this (supplied again when it is made again)."""

    server: str
    tool: str
    mode: str
    message: str
    schema: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    key: str = ""
    state: str | None = None
    given: tuple[dict[str, Any], ...] = ()

    @property
    def domain(self) -> str:
        return (urlsplit(self.url).hostname or "") if self.url else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "tool": self.tool,
            "mode": self.mode,
            "message": self.message,
            "schema": self.schema,
            "url": self.url,
            "domain": self.domain,
            "key": self.key,
            "state": self.state,
            "given": list(self.given),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> InputRequest:
        return InputRequest(
            server=str(data.get("server", "")),
            tool=str(data.get("tool", "")),
            mode=str(data.get("mode", FORM)),
            message=str(data.get("message", "")),
            schema=dict(data.get("schema") or {}),
            url=str(data.get("url", "")),
            key=str(data.get("key", "")),
            state=data.get("state"),
            given=tuple(data.get("given") or ()),
        )

    def answered(self, action: str, content: dict[str, Any] | None) -> dict[str, Any]:
        """This question's answer as it is kept and supplied again: what it answered, and how."""
        return {
            "key": self.key,
            "state": self.state,
            "mode": self.mode,
            "schema": self.schema,
            "url": self.url,
            "action": action,
            "content": content if action == "accept" and self.mode == FORM else None,
        }


@dataclass(slots=True, frozen=True)
class CallInputs:
    """What a call that asked before is made again with: every answer so far, in the order asked,
    and the state the server's last ``input_required`` carried (2026-07-28)."""

    answers: tuple[dict[str, Any], ...] = ()
    state: str | None = None
