"""Frontend tools: the tools a client declares in RunAgentInput.tools and runs itself.

Each becomes a proxy the model can call. A call streams TOOL_CALL_START/ARGS/END
and no result; the HTTP run ends (RUN_FINISHED success, naming the pending calls
for 1.0 clients) while the agent run waits; the client runs the tool and posts
the next request on the thread, whose messages end with a ``tool`` message per
call, and the agent run goes on with those results.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agents.tools.base import Tool, ToolContext, ToolError, ToolOutput, ToolRegistry
from agui.decode import DecodedInput


async def _run_by_the_client(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raise ToolError("a frontend tool is run by the client, not here")


def set_frontend_tools(registry: ToolRegistry, decoded: DecodedInput) -> None:
    """Replaces the registry's frontend tools with those of this request. A client tool may not
    take the name of one of the server's own tools: the server's stays, the client's is ignored.
    With AGUI_FRONTEND_TOOLS=off the request's tools are all ignored."""
    for name in [name for name, tool in registry.tools.items() if tool.frontend]:
        del registry.tools[name]
    if not settings.FRONTEND_TOOLS:
        return
    for declared in decoded.model.tools or []:
        if declared.name in registry.tools:
            continue
        schema = declared.parameters if isinstance(declared.parameters, dict) else {"type": "object"}
        registry.tools[declared.name] = Tool(
            name=declared.name,
            description=declared.description,
            input_schema=schema or {"type": "object"},
            func=_run_by_the_client,
            read_only=True,  # it changes nothing on the server; the client decides what it does
            frontend=True,
        )


def client_tool_results(decoded: DecodedInput) -> dict[str, tuple[str, str]]:
    """The trailing ``tool`` messages of the request: toolCallId -> (message id, content)."""
    results: dict[str, tuple[str, str]] = {}
    for message in reversed(decoded.raw["messages"]):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        results[str(message.get("toolCallId"))] = (str(message.get("id")), str(content or ""))
    return results
