"""Approvals: who decides whether a tool call runs.

The loop asks its Approver before every tool call. An approver applies the
permission policy and, where the policy says "ask", asks a person and waits;
nobody answering before the deadline fails closed. How a person is asked
(an AG-UI interrupt, the admin, the REST API) is the surface's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from agents.tools.base import Tool


@dataclass(slots=True, frozen=True)
class ApprovalRequest:
    """A tool call waiting for a person: an approval, or (``question``) the agent asking something."""

    id: str
    tool_call_id: str
    tool: str
    arguments: dict[str, Any]
    message: str
    expires_at: datetime
    question: bool = False
    client_tool: bool = False  # not a question for a person: a tool the client runs


@dataclass(slots=True, frozen=True)
class Answer:
    approved: bool
    reason: str = ""
    always: bool = False  # remember the approval for the session
    answered_by: str = ""
    timed_out: bool = False
    text: str = ""  # the reply to a question, or what a client-side tool returned
    message_id: str = ""  # the client's id for that result, when it sent one
    cancelled: bool = False  # the run was cancelled while it waited

    def refusal(self, tool: str) -> str:
        """What the model reads when the call was not allowed."""
        if self.timed_out:
            return f"not run: nobody approved this {tool} call in time, so it was denied"
        if self.reason:
            return f"not run: the user denied this {tool} call: {self.reason}"
        return f"not run: the {tool} call was denied"


class Approver(Protocol):
    async def decide(self, tool: Tool, tool_call_id: str, arguments: dict[str, Any]) -> Answer:
        """Whether the call may run; may wait for a person, and never raises for a refusal."""
        ...

    async def ask(self, tool_call_id: str, question: str) -> Answer:
        """Puts the agent's question to the person; the reply is ``text`` of an approved Answer."""
        ...

    async def run_on_client(self, tool_call_id: str, tool: str, arguments: dict[str, Any]) -> Answer:
        """Has the client run one of its own tools; its result is ``text`` of an approved Answer."""
        ...


class AllowAll:
    """For runs nobody supervises by design (tests of the loop, trusted deployments)."""

    async def decide(self, tool: Tool, tool_call_id: str, arguments: dict[str, Any]) -> Answer:
        return Answer(approved=True, reason="allowed")

    async def ask(self, tool_call_id: str, question: str) -> Answer:
        return Answer(approved=False, reason="nobody is there to answer questions in this run")

    async def run_on_client(self, tool_call_id: str, tool: str, arguments: dict[str, Any]) -> Answer:
        return Answer(approved=False, reason="no client is there to run it")
