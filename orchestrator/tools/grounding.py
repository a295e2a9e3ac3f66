"""Grounding: the agent reads the code before it changes anything.

Three modes: ``off``; ``prompt`` (advisory: the protocol is in the system prompt, nothing is
enforced; the default of sub-agents, which their parent has already scoped); ``enforced`` (the gate:
until the model calls ``grounding_report{understood: true}``, or the run has spent its grounding
iterations, only the tools of ``GATE_ALLOWED_TOOLS`` and other read-only tools may run).

grounding_report is answered by the run itself (orchestrator/questions.py: it opens the gate, or puts
the agent's question to the person); its function here is never called.
"""

from __future__ import annotations

from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolOutput, ToolRegistry


async def _answered_by_the_loop(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raise ToolError("grounding_report is answered by the run, not called directly")


GROUNDING_REPORT = Tool(
    name="grounding_report",
    description=(
        "Report your understanding of the task before changing anything: whether you understood it, "
        "the files that matter and the evidence you read. If you did not understand, say what is "
        "missing and ask your question."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "understood": {"type": "boolean"},
            "relevant_files": {"type": "array", "items": {"type": "string"}},
            "evidence": {"type": "string", "description": "What you read that supports your understanding."},
            "missing_info": {
                "type": "string",
                "description": "What you could not locate or work out, when understood is false.",
            },
            "question": {"type": "string", "description": "What you need to know, when understood is false."},
        },
        "required": ["understood"],
    },
    func=_answered_by_the_loop,
    kind=ToolKind.RUN,
)

# What the gate lets through while it is closed, by name (the seed's list, with this project's
# names): exploration, the web, questions and the plan. bash is here because it still passes its own
# approval (the permission rules; with no rule it asks unless AGENT_MUTATING_TOOLS=on). Names the
# project does not have (symbol_search, env_read, ...) are kept so a tool added under them is let
# through too. Every other read-only tool passes as well; what changes the workspace does not.
GATE_ALLOWED_TOOLS = frozenset(
    {
        "glob",
        "grep",
        "symbol_search",
        "file_read",
        "bash",
        "request_network_access",  # bash's way to a host its proxy refused; it asks a person too
        "list_tools",
        "env_read",
        "web_search",
        "web_fetch",
        "session_history",
        "agents_list",
        "ask_user",
        "context",
        "todo",
        "todo_write",
        "grounding_report",
    }
)


def gate_allows(tool: Tool, *, grounded: bool) -> bool:
    """Whether ``tool`` may be offered and run: always once grounded; before, only what the gate lets through."""
    return grounded or tool.name in GATE_ALLOWED_TOOLS or tool.read_only


def gate_refusal(tool: Tool) -> ToolOutput:
    """What the model reads when it calls a tool the closed gate holds back."""
    return ToolOutput(
        f"not yet: the grounding gate is closed; report your understanding with grounding_report "
        f"(understood: true) before using {tool.name}",
        True,
    )


GROUNDING_PROMPT_ADVISORY = (
    "\n\nGrounding: before you change anything, read the code the way a person would. Locate what the "
    "request refers to with glob and grep, read it with file_read, and go on until the request maps to "
    "concrete files and symbols. Then call grounding_report with understood true, the relevant files and "
    "your evidence. If the code and documents do not show you where the relevant code is, do not guess: "
    "call grounding_report with understood false, what is missing (missing_info) and your question, and "
    "the user will be asked. If the request itself plainly lacks what you need, you may ask at once."
)

GROUNDING_PROMPT_ENFORCED = GROUNDING_PROMPT_ADVISORY + (
    "\n\nThe grounding gate is ACTIVE for this task: only exploration tools (glob, grep, file_read, "
    "bash, the web tools, ask_user, todo_write and other read-only tools) are available until you call "
    "grounding_report. When the request maps to concrete files (or plainly needs no codebase context), "
    'call grounding_report{understood: true, relevant_files: [...], evidence: "..."} to unlock all '
    "tools and proceed. If you cannot locate what the request refers to, call "
    'grounding_report{understood: false, missing_info: "...", question: "..."}: the question is '
    "shown to the user and the run waits for the answer. After {max_iterations} model calls the gate "
    "opens anyway."
)


# For a run without grounding_report (a sub-agent: the thread's grounding is its parent's).
GROUNDING_PROMPT_NO_REPORT = (
    "\n\nGrounding: before you change anything, read the code the way a person would. Locate what the "
    "task refers to with glob and grep and read it with file_read, until the task maps to concrete files "
    "and symbols. If you cannot find what it refers to, do not guess: stop and say in your final message "
    "what is missing."
)


def grounding_prompt(mode: str, *, max_iterations: int, tools: ToolRegistry) -> str:
    """What the system prompt gains in ``mode``: nothing, the advisory protocol, or that and the gate
    (a run whose ``tools`` lack grounding_report gets the advisory protocol without it)."""
    if mode not in ("prompt", "enforced"):
        return ""
    if GROUNDING_REPORT.name not in tools.tools:
        return GROUNDING_PROMPT_NO_REPORT
    if mode == "enforced":
        return GROUNDING_PROMPT_ENFORCED.replace("{max_iterations}", str(max_iterations))
    return GROUNDING_PROMPT_ADVISORY
