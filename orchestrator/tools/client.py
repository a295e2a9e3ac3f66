"""The client's own tools (AG-UI frontend tools): the model may call them, the client runs them.

A call of one is never run here: the loop leaves it open (orchestrator/waits.py) and the
run goes on when the client sends its result.
"""

from __future__ import annotations

from typing import Any

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolKind, ToolOutput, ToolRegistry


async def _run_by_the_client(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    raise ToolError("a frontend tool is run by the client, not here")


def add_client_tools(registry: ToolRegistry, declared: list[dict[str, Any]]) -> None:
    """Adds the client's tools (``{name, description, parameters}``). A client tool may not take
    the name of one of the server's own tools: the server's stays, the client's is ignored."""
    for spec in declared:
        name = spec["name"]
        if name in registry.tools:
            continue
        schema = spec.get("parameters")
        registry.tools[name] = Tool(
            name=name,
            description=spec.get("description", ""),
            input_schema=schema if isinstance(schema, dict) and schema else {"type": "object"},
            func=_run_by_the_client,
            read_only=True,  # it changes nothing on the server; the client decides what it does
            kind=ToolKind.CLIENT,
        )
