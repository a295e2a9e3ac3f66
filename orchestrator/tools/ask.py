"""ask_user: the agent asks the person a question and waits for the reply.

The loop answers this tool itself through its Approver (the surface decides how
a person is asked); its function here is never called.
"""

from __future__ import annotations

from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolOutput


async def _answered_by_the_loop(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raise ToolError("ask_user is answered by the run, not called directly")


ASK_USER = Tool(
    name="ask_user",
    description=(
        "Ask the user a question and wait for the reply, when you cannot go on without their input "
        "(a choice, a missing fact, a confirmation of intent). Ask one clear question."
    ),
    input_schema={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question, as the user will read it."}},
        "required": ["question"],
    },
    func=_answered_by_the_loop,
    kind=ToolKind.RUN,
)
