"""Frontend tools: the tools a client declares in RunAgentInput.tools and runs itself.

Each becomes a proxy the model can call (agents/tools/client.py). A call streams
TOOL_CALL_START/ARGS/END and no result; the HTTP run ends (RUN_FINISHED success,
naming the pending calls for 1.0 clients) while the agent run waits as a
checkpoint; the client runs the tool and posts the next request on the thread,
whose messages end with a ``tool`` message per call, and the agent run goes on
with those results, in whichever process takes that request.
"""

from __future__ import annotations

from typing import Any

from agui.decode import DecodedInput


def declared_tools(decoded: DecodedInput) -> list[dict[str, Any]]:
    """The client's own tools as this request declares them (the set may change between requests)."""
    return [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        for tool in decoded.model.tools or []
    ]


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
