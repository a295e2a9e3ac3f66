"""Approvals: who decides whether a tool call runs.

The loop asks its Approver before every tool call. An approver applies the
permission policy; where the policy says "ask", the run ends as waiting and
goes on once a person answered (orchestrator/waits.py); nobody answering before the
deadline fails closed. How a person is asked (an AG-UI interrupt, the admin,
the REST API) is the surface's business.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.tools.base import Tool


@dataclass(slots=True, frozen=True)
class Answer:
    approved: bool
    reason: str = ""
    always: bool = False  # remember the approval for the session
    answered_by: str = ""
    timed_out: bool = False
    text: str = ""  # the reply to a question, or what a client-side tool returned
    # The client ran its tool and it failed: what it said went wrong (an AG-UI tool message's
    # ``error``). The model reads this, as a failed result; ``text`` stays what the client sent.
    error: str = ""
    message_id: str = ""  # the client's id for that result, when it sent one
    cancelled: bool = False  # the run was cancelled while it waited
    superseded: bool = False  # the user wrote a new message instead of answering

    def refusal(self, tool: str) -> str:
        """What the model reads when the call was not allowed."""
        if self.timed_out:
            return f"not run: nobody approved this {tool} call in time, so it was denied"
        if self.superseded:
            return f"not run: the user wrote a new message instead of approving this {tool} call"
        if self.reason:
            return f"not run: the user denied this {tool} call: {self.reason}"
        return f"not run: the {tool} call was denied"


@dataclass(slots=True, frozen=True)
class Ask:
    """The policy wants a person to decide: ``message`` is what they read, ``reason`` why they are asked."""

    message: str
    reason: str


class Approver(Protocol):
    """Decides whether a call runs. A call that needs a person is not waited for here: ``decide``
    says ``Ask``, and the loop ends its run as waiting (orchestrator/waits.py)."""

    # Whether anyone can answer at all (a person, the client); without, questions are refused.
    can_wait: bool
    approval_seconds: float  # how long a person has to answer
    client_tool_seconds: float  # how long a client has to run one of its tools

    async def decide(self, tool: Tool, tool_call_id: str, arguments: dict[str, Any]) -> Answer | Ask:
        """Allowed, refused (never raises for a refusal), or to be asked."""
        ...


class AllowAll:
    """For runs nobody supervises by design (tests of the loop, trusted deployments)."""

    can_wait = False
    approval_seconds = 0.0
    client_tool_seconds = 0.0

    async def decide(self, tool: Tool, tool_call_id: str, arguments: dict[str, Any]) -> Answer | Ask:
        return Answer(approved=True, reason="allowed")
