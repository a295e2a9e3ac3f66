"""Approvals asked through AG-UI interrupts.

A call the policy wants a person to approve ends the HTTP run with
RUN_FINISHED ``outcome: {type: "interrupt"}``; the agent run itself waits.
The client's next request answers with ``resume`` entries and the agent run
goes on in that request's stream. Nobody answering by ``expiresAt`` fails
closed: the call is denied, recorded, and the model told.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ag_ui.core import ResumeEntry
from django.utils import timezone

from agents.approval_text import approval_call, approval_message
from agents.approvals import Answer, ApprovalRequest
from agents.metrics import APPROVAL_SECONDS, APPROVALS
from agents.permissions import Decision, Verdict, primary_argument
from agents.tools.base import Tool
from threads import selectors
from threads.dbthread import on_db_thread
from threads.models import Approval
from threads.services import approval_answer, approval_request

# How often a waiting run looks for an answer given outside the chat.
ANSWER_POLL_SECONDS = 1.0

# The answer a person gives, as the interrupt's responseSchema says.
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the call."},
        "always": {"type": "boolean", "description": "Also run such calls from now on in this conversation."},
        "reason": {"type": "string", "description": "Why not, for the agent to read."},
    },
    "required": ["approved"],
}


# The reply to the agent's question (ask_user).
QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your reply to the agent's question."}},
    "required": ["answer"],
}


@dataclass(slots=True)
class Pending:
    request: ApprovalRequest
    answer: asyncio.Future[Answer]
    announced: bool = False


@dataclass(slots=True)
class Waiting:
    """The approvals an agent run is waiting for, by interrupt id."""

    pending: dict[str, Pending] = field(default_factory=dict)

    def announced(self) -> list[Pending]:
        return [p for p in self.pending.values() if p.announced]

    def cancel_all(self) -> None:
        """The run is cancelled: nothing it waits for will be answered (recorded by the approver)."""
        for pending in self.pending.values():
            if not pending.answer.done():
                pending.answer.set_result(Answer(approved=False, reason="the run was cancelled", cancelled=True))


def interrupt_of(request: ApprovalRequest) -> dict[str, Any]:
    # Keys in the order of the protocol's Interrupt model (frames stay byte-identical).
    return {
        "id": request.id,
        "reason": "input_required" if request.question else "confirmation",
        "message": request.message,
        "toolCallId": request.tool_call_id,
        "responseSchema": QUESTION_SCHEMA if request.question else RESPONSE_SCHEMA,
        "expiresAt": request.expires_at.isoformat().replace("+00:00", "Z"),
        **({} if request.question else {"metadata": approval_call(request.tool, request.arguments)}),
    }


def answer_of(entry: ResumeEntry, answered_by: str, *, question: bool = False) -> tuple[Answer, str]:
    """A resume entry as an Answer, with the decision to record."""
    if entry.status == "cancelled":
        return Answer(approved=False, reason="cancelled by the user", answered_by=answered_by), "cancelled"
    payload = entry.payload
    if question:
        reply = payload.get("answer") if isinstance(payload, dict) else payload
        text = reply if isinstance(reply, str) else json.dumps(reply)
        return Answer(approved=True, text=text, reason=text, answered_by=answered_by), Approval.Decision.APPROVED
    if isinstance(payload, bool):
        payload = {"approved": payload}
    if not isinstance(payload, dict):
        payload = {}
    approved = payload.get("approved") is True
    reason = payload.get("reason")
    answer = Answer(
        approved=approved,
        reason=reason if isinstance(reason, str) else "",
        always=approved and payload.get("always") is True,
        answered_by=answered_by,
    )
    return answer, Approval.Decision.APPROVED if approved else Approval.Decision.DENIED


def _summary(tool: str, arguments: dict[str, Any]) -> str:
    """The call in a few words a person can judge: the command, the path, the files of a patch."""
    targets = primary_argument(tool, arguments)
    text = ", ".join(t for t in targets if t) or json.dumps(arguments)
    return f"`{text[:300]}`"


class InterruptApprover:
    """The loop's Approver for AG-UI runs.

    ``policy`` says allow, deny or ask for a call; ``suspend`` ends the current
    AG-UI run on the given requests; ``go_on`` gives the agent run a stream
    again when it continues without a resume (after an expiry).
    """

    def __init__(
        self,
        *,
        run_pk: Callable[[], Any],
        waiting: Waiting,
        policy: Callable[[Tool, dict[str, Any]], Awaitable[Verdict]],
        remember: Callable[[str, dict[str, Any]], Awaitable[None]],
        suspend: Callable[[list[ApprovalRequest]], Awaitable[None]],
        go_on: Callable[[], Awaitable[None]],
        timeout: float,
        client_tool_timeout: float,
    ) -> None:
        self.run_pk = run_pk
        self.waiting = waiting
        self.policy = policy
        self.remember = remember
        self.suspend = suspend
        self.go_on = go_on
        self.timeout = timeout
        self.client_tool_timeout = client_tool_timeout
        self._announcing: asyncio.Task[None] | None = None

    async def decide(self, tool: Tool, tool_call_id: str, arguments: dict[str, Any]) -> Answer:
        verdict = await self.policy(tool, arguments)
        if verdict.decision == Decision.ALLOW:
            return Answer(approved=True, reason=verdict.reason)
        if verdict.decision == Decision.DENY:
            return Answer(approved=False, reason=f"a permission rule forbids it ({verdict.reason})")
        request = ApprovalRequest(
            id=f"approval_{uuid.uuid4().hex}",
            tool_call_id=tool_call_id,
            tool=tool.name,
            arguments=arguments,
            message=approval_message(tool.name, arguments, verdict.reason),
            expires_at=timezone.now() + timedelta(seconds=self.timeout),
        )
        answer = await self._wait(request)
        if answer.approved and answer.always:
            await self.remember(tool.name, arguments)
        return answer

    async def ask(self, tool_call_id: str, question: str) -> Answer:
        request = ApprovalRequest(
            id=f"question_{uuid.uuid4().hex}",
            tool_call_id=tool_call_id,
            tool="ask_user",
            arguments={"question": question},
            message=question,
            expires_at=timezone.now() + timedelta(seconds=self.timeout),
            question=True,
        )
        return await self._wait(request)

    async def run_on_client(self, tool_call_id: str, tool: str, arguments: dict[str, Any]) -> Answer:
        request = ApprovalRequest(
            id=tool_call_id,
            tool_call_id=tool_call_id,
            tool=tool,
            arguments=arguments,
            message="",
            expires_at=timezone.now() + timedelta(seconds=self.client_tool_timeout),
            client_tool=True,
        )
        return await self._wait(request)

    async def _wait(self, request: ApprovalRequest) -> Answer:
        """Records the request, ends the AG-UI run on it (with any asked alongside) and waits."""
        timeout = self.client_tool_timeout if request.client_tool else self.timeout
        pending = Pending(request, asyncio.get_running_loop().create_future())
        self.waiting.pending[request.id] = pending
        if not request.client_tool:  # a client's tool is no decision; there is nothing to record
            await on_db_thread(
                approval_request,
                interrupt_id=request.id,
                run_id=self.run_pk(),
                tool_call_id=request.tool_call_id,
                tool=request.tool,
                arguments=request.arguments,
                message=request.message,
                expires_at=request.expires_at,
            )
        if self._announcing is None or self._announcing.done():
            self._announcing = asyncio.get_running_loop().create_task(self._announce())
        asked = time.monotonic()
        watcher = None if request.client_tool else asyncio.get_running_loop().create_task(self._watch(pending))
        try:
            async with asyncio.timeout(timeout):
                answer = await pending.answer
        except TimeoutError:
            if not request.client_tool:
                await on_db_thread(approval_answer, interrupt_id=request.id, decision=Approval.Decision.TIMEOUT)
            answer = Answer(approved=False, timed_out=True)
        finally:
            if watcher is not None:
                watcher.cancel()
            self.waiting.pending.pop(request.id, None)
        if answer.cancelled and not request.client_tool:
            await on_db_thread(approval_answer, interrupt_id=request.id, decision=Approval.Decision.CANCELLED)
        # Answered without a resume (the admin, the API, the deadline): nobody is
        # streaming, so the agent run goes on in a run of its own.
        await self.go_on()
        if not request.client_tool:
            decision = "timeout" if answer.timed_out else "approved" if answer.approved else "denied"
            APPROVALS.labels(request.tool, decision).inc()
            APPROVAL_SECONDS.observe(time.monotonic() - asked)
        return answer

    async def _watch(self, pending: Pending) -> None:
        """Takes an answer given outside the chat (the admin, the REST API, another process)."""
        while not pending.answer.done():
            await asyncio.sleep(ANSWER_POLL_SECONDS)
            approval = await on_db_thread(selectors.approval_get, interrupt_id=pending.request.id)
            if approval is None or approval.decision == Approval.Decision.PENDING or pending.answer.done():
                continue
            approved = approval.decision == Approval.Decision.APPROVED
            pending.answer.set_result(
                Answer(
                    approved=approved, reason=approval.reason, always=approval.always, answered_by=approval.answered_by
                )
            )

    async def _announce(self) -> None:
        # One tick later, so parallel calls that all ask end the run together,
        # in one interrupt outcome.
        await asyncio.sleep(0)
        fresh = [p for p in self.waiting.pending.values() if not p.announced]
        for pending in fresh:
            pending.announced = True
        if fresh:
            await self.suspend([p.request for p in fresh])
