"""What the run answers itself: a question put to the person, the grounding report, and an answer as
the model reads it. Pure functions: they decide, and the tool calls of a turn (orchestrator/toolcalls.py)
act on what they return."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.approvals import Answer
from orchestrator.tools.base import ToolOutput
from orchestrator.tools.inputs import ACTIONS, InputRequest
from orchestrator.waits import OpenCall, WaitKind


def question_of(arguments: dict[str, Any], *, can_wait: bool) -> str | ToolOutput:
    """ask_user's question, to be put to the person, or why it cannot be."""
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        return ToolOutput("argument 'question' must be a non-empty string", True)
    if not can_wait:
        return ToolOutput("nobody is there to answer questions in this run", True)
    return question.strip()


@dataclass(slots=True, frozen=True)
class Reported:
    """A grounding report as the run records it: ``report`` for the listeners (None when the
    arguments were refused), whether it opens the gate, and a question to put to the person or
    what the model reads now."""

    report: dict[str, Any] | None
    opens_gate: bool
    reply: str | ToolOutput


def grounding_report(arguments: dict[str, Any], *, can_ask: bool) -> Reported:
    """grounding_report's arguments read: ``understood`` opens the gate; a question in a report that
    is not understood is put to the person when someone can answer (``can_ask``), else recorded as
    what is missing and the model is told to go on without it."""
    understood = arguments.get("understood")
    if not isinstance(understood, bool):
        return Reported(None, False, ToolOutput("argument 'understood' must be true or false", True))
    report: dict[str, Any] = {
        "understood": understood,
        "relevantFiles": [f for f in arguments.get("relevant_files") or [] if isinstance(f, str)],
        "evidence": str(arguments.get("evidence") or ""),
    }
    if not understood and str(arguments.get("missing_info") or "").strip():
        report["missingInfo"] = str(arguments["missing_info"]).strip()
    if understood:
        return Reported(report, True, ToolOutput("grounding recorded; you may now change the workspace"))
    question = arguments.get("question")
    asked = question.strip() if isinstance(question, str) else ""
    if asked and not can_ask:
        # Nobody answers questions in this run (AGUI_HUMAN_IN_THE_LOOP=off, a sub-agent): the
        # question is recorded in the report and the model is told to go on without it.
        report["missingInfo"] = report.get("missingInfo") or asked
        return Reported(
            report,
            False,
            ToolOutput(
                "noted, but nobody can answer questions in this run: keep investigating with the tools you "
                "have, then report again; if the answer cannot be found, say what is missing in your final reply"
            ),
        )
    if asked:
        report["question"] = asked
        return Reported(report, False, asked)
    keep_on = "noted: keep investigating until you understand the task, then report again"
    return Reported(report, False, ToolOutput(keep_on))


def answered(call: OpenCall, answer: Answer) -> ToolOutput:
    """A question's or a client tool's answer, as the model reads it."""
    if call.kind is WaitKind.CLIENT:
        if answer.approved and answer.error:
            # The client ran it and it failed: the model must not read that as a success.
            return ToolOutput(answer.error, True)
        if answer.approved:
            return ToolOutput(answer.text)
        if answer.timed_out:
            return ToolOutput("the client did not run this tool in time", True)
        if answer.superseded:
            return ToolOutput("not run: the user wrote a new message instead", True)
        return ToolOutput(answer.reason or "the client did not run this tool", True)
    if answer.approved:
        return ToolOutput(answer.text or "(the user replied with nothing)")
    if answer.timed_out:
        return ToolOutput("the user did not answer in time; go on without it or stop and say why", True)
    if answer.superseded:
        return ToolOutput("the user did not answer: they wrote a new message instead", True)
    return ToolOutput(f"the user did not answer: {answer.reason or 'declined'}", True)


def input_reply(answer: Answer) -> tuple[str, dict[str, Any] | None] | None:
    """A tool's question's answer as the tool is given it, ``(action, content)``; None when nobody
    answered it (timed out, superseded, the run cancelled). The answer's ``text`` is the JSON the
    surface recorded: ``{"action": "accept"|"decline"|"cancel", "content": {...}}``."""
    if not answer.approved:
        return None
    try:
        reply = json.loads(answer.text)
    except ValueError:
        return None
    if not isinstance(reply, dict) or reply.get("action") not in ACTIONS:
        return None
    content = reply.get("content")
    return str(reply["action"]), content if isinstance(content, dict) else None


def unanswered_input(request: InputRequest, answer: Answer) -> str:
    """What the model reads when a tool's question was not answered (the call is not made again)."""
    asked = f"the MCP server {request.server!r} asked the user a question during the call of {request.tool!r}"
    if answer.timed_out:
        return f"not completed: {asked} and nobody answered in time"
    if answer.superseded:
        return f"not completed: {asked} and the user wrote a new message instead of answering"
    return f"not completed: {asked} and it was not answered ({answer.reason or 'cancelled'})"


def deadline(seconds: float) -> str:
    """When an answer asked for now is due: ISO 8601, UTC."""
    at = datetime.now(UTC) + timedelta(seconds=seconds)
    return at.isoformat().replace("+00:00", "Z")
