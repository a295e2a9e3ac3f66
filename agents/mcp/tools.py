"""A server's tools as the run's ``Tool``s: named ``mcp__<server>__<tool>`` (agents/mcp/names.py),
with the server's description and input schema, read-only when the server's annotations say
``readOnlyHint: true`` (so they run like the read-only tools and pass the grounding gate), asking
otherwise (agents/permissions.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import mcp.types as mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agents.mcp.connection import McpAnswerTooLarge, McpServer, McpUnavailable
from agents.mcp.elicitation import Asked, Declined
from agents.mcp.progress import CoalescedProgress
from agents.mcp.results import tool_output
from agents.mcp.revisions import TooManyRounds
from agents.metrics import record_mcp_call
from orchestrator.approval_text import MAX_LINE_CHARS
from orchestrator.tools.base import CURRENT_CALL_ID, Tool, ToolContext, ToolError, ToolOutput
from orchestrator.tools.inputs import CallInputs, InputRequest
from orchestrator.tools.targets import NO_TARGETS

MAX_DESCRIPTION = 4000
_SHOWN_ARGUMENTS = 10


def is_read_only(listed: mcp_types.Tool) -> bool:
    return listed.annotations is not None and listed.annotations.read_only_hint is True


def is_destructive(listed: mcp_types.Tool) -> bool:
    """The spec's default: a tool that is not read-only may be destructive unless it says it is not."""
    annotations = listed.annotations
    if annotations is None:
        return True
    return annotations.read_only_hint is not True and annotations.destructive_hint is not False


class RunCancelled(Exception):
    """The run was cancelled while an MCP call was in flight."""


async def _unless_cancelled[T](call: Coroutine[Any, Any, T], context: ToolContext) -> T:
    """``call``'s result, or RunCancelled once the run is cancelled: the call is then cancelled
    too, and the SDK tells the server (MCP's notifications/cancelled)."""
    task = asyncio.ensure_future(call)
    cancelled = asyncio.ensure_future(context.cancelled.wait())
    try:
        await asyncio.wait({task, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancelled.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        raise RunCancelled
    return task.result()


def mcp_tool(server: McpServer, listed: mcp_types.Tool, name: str) -> Tool:
    server_name, tool_name = server.name, listed.name

    async def call(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        call_id = CURRENT_CALL_ID.get()

        def report(progress: float, total: float | None, message: str | None) -> None:
            context.progress(call_id, name, progress, total, server.redact(message or ""))

        progress = CoalescedProgress(report)
        inputs = context.inputs.get(call_id)
        try:
            result = await _unless_cancelled(
                server.call(tool_name, arguments, progress=progress, inputs=inputs), context
            )
        except RunCancelled:
            record_mcp_call(server_name, tool_name, "failed")
            raise ToolError(
                f"the run was cancelled; the call of {tool_name!r} on {server_name!r} was cancelled"
            ) from None
        except (Declined, TooManyRounds) as exc:
            record_mcp_call(server_name, tool_name, "failed")
            raise ToolError(f"MCP server {server_name!r}: {exc}") from None
        except (McpUnavailable, McpAnswerTooLarge, TimeoutError) as exc:
            record_mcp_call(server_name, tool_name, "failed")
            raise ToolError(str(exc)) from None
        except MCPError as exc:
            record_mcp_call(server_name, tool_name, "failed")
            refusal = server.redact(exc.error.message)
            raise ToolError(f"MCP server {server_name!r} refused the call: {refusal}") from None
        except ValidationError:
            record_mcp_call(server_name, tool_name, "failed")
            raise ToolError(f"MCP server {server_name!r} answered with something that is not a tool result") from None
        finally:
            progress.close()
        if isinstance(result, Asked):
            return ToolOutput("", needs_input=_input_request(server, tool_name, result, inputs))
        output = tool_output(result)
        output.content = server.redact(output.content)  # what the run records and streams (#49 item 2)
        record_mcp_call(server_name, tool_name, "error" if output.is_error else "ok")
        return output

    destructive = is_destructive(listed)

    def approval_text(arguments: dict[str, Any]) -> str:
        return describe_call(server_name, tool_name, arguments, destructive=destructive)

    description = listed.description or listed.title or f"The tool {tool_name} of the MCP server {server_name}."
    if len(description) > MAX_DESCRIPTION:
        description = description[:MAX_DESCRIPTION] + "…"
    schema = dict(listed.input_schema or {})
    schema.setdefault("type", "object")
    return Tool(
        name=name,
        description=description,
        input_schema=schema,
        func=call,
        read_only=is_read_only(listed),
        targets=NO_TARGETS,
        approval_text=approval_text,
    )


def _input_request(server: McpServer, tool: str, asked: Asked, inputs: CallInputs | None) -> InputRequest:
    """The server's question as the run waits on it, without the server's secrets (#49 item 2): it is
    stored and shown to people, and a server may echo its token in a message, a form or a URL."""
    try:
        schema = json.loads(server.redact(json.dumps(asked.schema)))
    except ValueError:
        schema = {"type": "object"}
    return InputRequest(
        server=server.name,
        tool=tool,
        mode=asked.mode,
        message=server.redact(asked.message),
        schema=schema if isinstance(schema, dict) else {"type": "object"},
        url=server.redact(asked.url),
        key=asked.key,
        state=asked.state,
        given=inputs.answers if inputs else (),
    )


def describe_call(server: str, tool: str, arguments: dict[str, Any], *, destructive: bool) -> str:
    """The approval prompt of an MCP call: the server, the tool, its arguments one a line."""
    first = f"Allow the MCP server {server} to run its tool {tool}?"
    if destructive:
        first += " The server marks this tool as destructive."
    lines = [first]
    for key, value in list(arguments.items())[:_SHOWN_ARGUMENTS]:
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if len(shown) > MAX_LINE_CHARS:
            shown = f"{shown[:MAX_LINE_CHARS]}… ({len(shown) - MAX_LINE_CHARS} more characters)"
        lines.append(f"  {key}: {shown}")
    if len(arguments) > _SHOWN_ARGUMENTS:
        lines.append(f"  … ({len(arguments) - _SHOWN_ARGUMENTS} more arguments)")
    return "\n".join(lines)
