"""grounding_report: the agent states what it understood before it changes anything.

The loop answers this tool itself (it opens the grounding gate, or puts the
agent's question to the person); its function here is never called.
"""

from __future__ import annotations

from typing import Any

from agents.tools.base import Tool, ToolContext, ToolError, ToolOutput


async def _answered_by_the_loop(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raise ToolError("grounding_report is answered by the run, not called directly")


GROUNDING_REPORT = Tool(
    name="grounding_report",
    description=(
        "Report your understanding of the task before changing anything: whether you understood it, "
        "the files that matter and the evidence you read. If you did not understand, ask your question."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "understood": {"type": "boolean"},
            "relevant_files": {"type": "array", "items": {"type": "string"}},
            "evidence": {"type": "string", "description": "What you read that supports your understanding."},
            "question": {"type": "string", "description": "What you need to know, when understood is false."},
        },
        "required": ["understood"],
    },
    func=_answered_by_the_loop,
)

GROUNDING_PROMPT = (
    "\n\nBefore you change anything, look at the relevant code and call grounding_report with what you "
    "understood, the relevant files and your evidence. If the task is unclear, call it with understood "
    "false and your question."
)
