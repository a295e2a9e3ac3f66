"""Frontend tools: the tools a client declares in RunAgentInput.tools and runs itself.

Each becomes a proxy the model can call (orchestrator/tools/client.py). A call streams
TOOL_CALL_START/ARGS/END and no result; the HTTP run ends (RUN_FINISHED success,
naming the pending calls for 1.0 clients) while the agent run waits as a
checkpoint; the client runs the tool and posts the next request on the thread,
whose messages end with a ``tool`` message per call, and the agent run goes on
with those results, in whichever process takes that request.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agui.decode import DecodedInput
from threads.waits import ClientResult


def declared_tools(decoded: DecodedInput) -> list[dict[str, Any]]:
    """The client's own tools as this request declares them (the set may change between requests);
    none with AGUI_FRONTEND_TOOLS=off, where the request's tools are ignored."""
    if not settings.AGUI_FRONTEND_TOOLS:
        return []
    return [
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
        for tool in decoded.model.tools or []
    ]


def client_tool_results(decoded: DecodedInput) -> dict[str, ClientResult]:
    """The trailing ``tool`` messages of the request, by toolCallId. A message's ``error`` (the
    browser's tool failed) is kept: the model reads it as a failed result, not as an empty success."""
    results: dict[str, ClientResult] = {}
    for message in reversed(decoded.raw["messages"]):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        error = message.get("error")
        results[str(message.get("toolCallId"))] = ClientResult(
            message_id=str(message.get("id")),
            content=str(content or ""),
            error=error if isinstance(error, str) else "",
        )
    return results
