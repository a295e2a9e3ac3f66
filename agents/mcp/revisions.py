"""The two eras of MCP (issue #46): a server on the 2026-07-28 revision is found by ``server/discover``
and its calls may answer ``input_required``; a server on an earlier one (2025-11-25 and before) is
found by the ``initialize`` handshake and asks during the call (agents/mcp/elicitation.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp.types as mcp_types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.types.version import LATEST_MODERN_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from agents.mcp.elicitation import Asked, next_round, responses_for
from orchestrator.tools.inputs import MAX_ROUNDS, CallInputs

# How long a server has to answer ``server/discover`` before it is taken for one of the earlier era.
DISCOVER_SECONDS = 2.0
STATE_ONLY_SECONDS = 0.05  # the wait before retrying an ``input_required`` that carried only its state

CallOnce = Callable[..., Awaitable[mcp_types.CallToolResult | mcp_types.InputRequiredResult]]


class TooManyRounds(Exception):
    """The server kept answering ``input_required`` past MAX_ROUNDS."""


async def negotiate(session: ClientSession) -> None:
    """The 2026-07-28 revision's ``server/discover`` first, then, for a server that does not speak
    it (an error, a result naming no revision of its era, or no answer within DISCOVER_SECONDS),
    the ``initialize`` handshake of the revisions before it (the SDK's own ``auto`` policy, with a
    shorter wait: a server that ignores an unknown method would otherwise cost the SDK's 10 s)."""
    try:
        with anyio.fail_after(DISCOVER_SECONDS):
            raw = await session.send_discover(LATEST_MODERN_VERSION)
        result = mcp_types.DiscoverResult.model_validate(raw)
    except (MCPError, TimeoutError, ValidationError):
        await session.initialize()
        return
    if any(version in MODERN_PROTOCOL_VERSIONS for version in result.supported_versions):
        session.adopt(result)
    else:
        await session.initialize()


async def call_modern(call_once: CallOnce, inputs: CallInputs | None, server: str) -> mcp_types.CallToolResult | Asked:
    """A call on the 2026-07-28 revision (``call_once(input_responses=, request_state=)`` sends it):
    ``input_required`` rounds answered by ``inputs`` are retried at once; the first question not
    answered yet ends the call as ``Asked`` (the run waits on it, and the retry after the answer
    starts from its ``requestState``)."""
    answers = inputs.answers if inputs else ()
    state = inputs.state if inputs else None
    responses: dict[str, Any] | None = responses_for(answers, state) if inputs else None
    for _ in range(MAX_ROUNDS):
        result = await call_once(input_responses=responses or None, request_state=state)
        if not isinstance(result, mcp_types.InputRequiredResult):
            return result
        state, ahead = result.request_state, next_round(result, answers)
        if isinstance(ahead, Asked):
            return ahead
        if ahead is None:
            await asyncio.sleep(STATE_ONLY_SECONDS)  # only its state: the server is not done yet
        responses = ahead
    raise TooManyRounds(f"MCP server {server!r} answered input_required more than {MAX_ROUNDS} times in one call")
