"""sub_agent: delegate a focused task to a child run with its own tools and limits.

The loop runs this tool itself (orchestrator/subagents.py): the child is another
AgentLoop, so its function here is never called.
"""

from __future__ import annotations

from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolOutput


async def _run_by_the_loop(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raise ToolError("sub_agent is run by the orchestrator, not called directly")


SUB_AGENT = Tool(
    name="sub_agent",
    description=(
        "Delegate a focused, self-contained task to a sub-agent that works on its own in the same "
        "workspace and reports back a summary. Use it for work that needs many steps you do not need "
        "to see (surveying a codebase, reviewing a change, making a contained edit). Only the summary "
        "comes back, so ask for what you need in it. Sub-agents cannot ask the user anything."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "What the sub-agent must do, stated completely."},
            "context": {"type": "string", "description": "Facts it needs that it cannot find itself."},
            "system_prompt": {"type": "string", "description": "Replaces the default sub-agent instructions."},
            "allowed_tools": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The tools it may use (default: the tools you have, less those it cannot use).",
            },
            "role": {"type": "string", "description": "A short name for it, shown on the board (e.g. reviewer)."},
        },
        "required": ["task"],
    },
    func=_run_by_the_loop,
    kind=ToolKind.RUN,
    # It changes nothing itself: each of the child's calls is decided as the parent's are, and a
    # child gets only the tools its parent could use at that moment.
    read_only=True,
)
