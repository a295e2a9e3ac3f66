"""The permission wiring of a run: the rules in scope, the session's "yes, always" answers, and
what a person is asked when a rule or a tool's class says ask."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings

from agents.permissions import Decision, arules_for, evaluate, memory_key
from orchestrator.approval_text import approval_message
from orchestrator.approvals import Answer, Ask
from orchestrator.tools.base import Tool
from orchestrator.tools.workspace import Workspace
from threads.dbthread import on_db_thread
from threads.services.approvals import session_approved_always


class PolicyApprover:
    """The loop's Approver for runs a person supervises. Rules are read at each call, so an
    operator's edit applies at once; AGENT_MUTATING_TOOLS=on is auto-approve."""

    can_wait = True

    def __init__(
        self, *, agent_name: str, thread_id: str, session_id: uuid.UUID, workspace: Workspace | None = None
    ) -> None:
        self.agent_name = agent_name
        # The run's workspace, against which the rules resolve a call's paths (issue #24).
        self.workspace = workspace
        self.thread_id = thread_id
        self.session_id = session_id
        self.approval_seconds: float = settings.APPROVAL_TIMEOUT_SECONDS
        self.client_tool_seconds: float = settings.FRONTEND_TOOL_TIMEOUT_SECONDS

    async def decide(self, tool: Tool, tool_call_id: str, arguments: dict[str, Any]) -> Answer | Ask:
        rules = await arules_for(self.agent_name, self.thread_id)
        remembered = memory_key(tool.name, arguments) in await on_db_thread(
            session_approved_always, session_id=self.session_id
        )
        verdict = evaluate(
            rules,
            tool=tool,
            arguments=arguments,
            remembered=remembered,
            auto_approve=settings.AGENT_MUTATING_TOOLS == "on",
            workspace=self.workspace,
            ask_a_person=settings.AGUI_HUMAN_IN_THE_LOOP,
        )
        if verdict.decision == Decision.ALLOW:
            return Answer(approved=True, reason=verdict.reason)
        if verdict.decision == Decision.DENY:
            return Answer(approved=False, reason=f"a permission rule forbids it ({verdict.reason})")
        message = approval_message(tool.name, arguments, verdict.reason, describe=tool.approval_text)
        return Ask(message=message, reason=verdict.reason)
