"""Interrupts: how a run that waits for answers ends its AG-UI run, and how answers come back.

A call that needs a person ends the HTTP run with RUN_FINISHED
``outcome: {type: "interrupt", interrupts: [...]}``; the client answers with the
next request's ``resume`` entries. A client's own tool ends it with success
(naming the pending calls for a 1.0 client); the client answers with ``tool``
messages. The run itself is a checkpoint in the database meanwhile.
"""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import ResumeEntry

from orchestrator.approval_text import approval_call
from orchestrator.tools.inputs import FORM, URL, InputRequest
from orchestrator.waits import Checkpoint, OpenCall, WaitKind
from threads.elicitations import ElicitationReply, elicitation_check, is_elicitation, reply_of
from threads.models import Approval
from threads.waits import Decided

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


# What a URL-mode elicitation's answer says: whether the person went to the page (and is done there).
URL_ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"action": {"type": "string", "enum": ["accept", "decline", "cancel"]}},
    "required": ["action"],
}


def elicitation_interrupt(call: OpenCall) -> dict[str, Any]:
    """An MCP server's question mid-call (issue #46): reason ``mcp:elicitation``, the server's
    message, its schema as the ``responseSchema`` (form mode) and, in ``metadata``, the server, the
    tool and, in URL mode, the URL and its domain (a page shows the domain before it is followed)."""
    asked = InputRequest.from_json(call.input)
    metadata: dict[str, Any] = {"server": asked.server, "tool": asked.tool, "mode": asked.mode}
    if asked.mode == URL:
        metadata |= {"url": asked.url, "domain": asked.domain}
    return {
        "id": call.answer_id,
        "reason": "mcp:elicitation",
        "message": call.message,
        "toolCallId": call.call_id,
        "responseSchema": asked.schema if asked.mode == FORM else URL_ANSWER_SCHEMA,
        "expiresAt": call.expires_at,
        "metadata": metadata,
    }


def interrupt_of(call: OpenCall) -> dict[str, Any]:
    # Keys in the order of the protocol's Interrupt model (frames stay byte-identical).
    if call.kind is WaitKind.INPUT:
        return elicitation_interrupt(call)
    question = call.kind is WaitKind.QUESTION
    return {
        "id": call.answer_id,
        "reason": "input_required" if question else "confirmation",
        "message": call.message,
        "toolCallId": call.call_id,
        "responseSchema": QUESTION_SCHEMA if question else RESPONSE_SCHEMA,
        "expiresAt": call.expires_at,
        # The structured call, so a page can render it richly (a patch's diff, say).
        **({} if question else {"metadata": approval_call(call.name, call.arguments)}),
    }


def suspension_outcome(checkpoint: Checkpoint, *, v1: bool) -> dict[str, Any]:
    """What ends an AG-UI run whose agent run waits: the interrupts for a person, if any; else
    (only the client's own tools pending) success, naming the calls for a 1.0 client (``v1``).
    For a 1.0 client, an interrupt about a sub-agent's call names that sub-agent."""
    needed = checkpoint.answers_needed()
    questions = [call for call in needed if call.kind is not WaitKind.CLIENT]
    if questions:
        owners = checkpoint.owners() if v1 else {}
        interrupts = [
            {"subagentRunId": owners[call.answer_id], **interrupt_of(call)}
            if call.answer_id in owners
            else interrupt_of(call)
            for call in questions
        ]
        return {"type": "interrupt", "interrupts": interrupts}
    if v1:
        return {"type": "success", "pendingToolCallIds": [call.call_id for call in needed]}
    return {}


def decided_of(entry: ResumeEntry, elicitation: dict[str, Any] | None = None, *, field: str = "") -> Decided:
    """A resume entry as the answer to record. Questions are told apart by their id's prefix; an
    elicitation's answer is checked against its question (``elicitation``, the Approval row's)
    and raises ElicitationInvalid naming the ``field`` that is wrong."""
    if is_elicitation(entry.interrupt_id):
        asked = elicitation or {}
        cancelled = entry.status == "cancelled"
        action, content = reply_of(entry.payload, cancelled=cancelled, schema=asked.get("schema") or {})
        checked = elicitation_check(asked, action, content, field=field) if asked else ElicitationReply(action, None)
        return Decided(Approval.Decision.APPROVED, text=checked.recorded())
    if entry.status == "cancelled":
        return Decided(Approval.Decision.CANCELLED, "cancelled by the user")
    payload = entry.payload
    if entry.interrupt_id.startswith("question_"):
        reply = payload.get("answer") if isinstance(payload, dict) else payload
        return Decided(Approval.Decision.APPROVED, text=reply if isinstance(reply, str) else json.dumps(reply))
    if isinstance(payload, bool):
        payload = {"approved": payload}
    if not isinstance(payload, dict):
        payload = {}
    approved = payload.get("approved") is True
    reason = payload.get("reason")
    return Decided(
        Approval.Decision.APPROVED if approved else Approval.Decision.DENIED,
        reason=reason if isinstance(reason, str) else "",
        always=approved and payload.get("always") is True,
    )
