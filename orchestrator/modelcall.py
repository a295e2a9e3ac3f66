"""One model call, streamed to the run's listener and returned as the model's turn.

``call_model`` streams the reply as run events (orchestrator/callstream.py), retries what is safe to retry,
and returns ``Final`` (the model stopped) or ``ToolCalls`` (it asked for tools), each with the reply
and its usage. A cancel that arrives while the model streams raises ``Stopped``: nothing of the cut
reply is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestrator.callstream import CallStream
from orchestrator.events import AssistantMessage, Phase, PhaseChanged, RunListener, Usage
from orchestrator.providers.base import ModelError, ModelProvider, ModelReply, ModelRequest

log = logging.getLogger(__name__)


class Stopped(Exception):
    """A cancel arrived while the model was streaming."""


@dataclass(slots=True, frozen=True)
class Final:
    """The model answered without calling a tool: the run's last turn."""

    reply: ModelReply
    messages: tuple[AssistantMessage, ...]


@dataclass(slots=True, frozen=True)
class ToolCalls:
    """The model asked for tools: ``calls`` are its tool_use blocks, in its order."""

    reply: ModelReply
    messages: tuple[AssistantMessage, ...]
    calls: list[dict[str, Any]]


async def call_model(
    provider: ModelProvider,
    request: ModelRequest,
    *,
    listener: RunListener,
    make_id: Callable[[str], str],
    told_model: str,
    retries: int,
    backoff: float,
    task_id: str,
) -> Final | ToolCalls:
    """Streams one call; ``told_model`` is the model the listener was last told of (on_model), so
    it hears of another one answering before that call's usage. Raises ModelError when the call
    failed and cannot be retried, Stopped on a cancel."""
    emit = listener.on_event
    emit(PhaseChanged(Phase.PLANNING, True))
    attempt = 0
    began = time.monotonic()
    should_continue = listener.should_continue
    while True:
        call = CallStream(emit, make_id)
        reply: ModelReply | None = None
        try:
            async with contextlib.aclosing(provider.stream(request)) as stream:
                async for item in stream:
                    kind = type(item)
                    if kind is list:
                        # What one read brought (orchestrator/providers/base.py), event by event.
                        for each in item:  # type: ignore[union-attr]
                            call.handle(each)
                            if not should_continue():
                                raise Stopped
                        continue
                    if kind is ModelReply:
                        reply = item  # type: ignore[assignment]
                    else:
                        call.handle(item)  # type: ignore[arg-type]
                    # A cancel stops the model mid-reply: nothing of it is committed.
                    if not should_continue():
                        raise Stopped
            if reply is None:
                raise ModelError("the model returned no reply", retryable=True, code="early_end")
        except ModelError as exc:
            if exc.retryable and not call.emitted and attempt < retries:
                delay = backoff * (2**attempt)
                attempt += 1
                log.warning("model call failed (%s); retry %d in %.1fs", exc.code, attempt, delay)
                await asyncio.sleep(delay)
                continue
            raise
        break
    messages = tuple(call.finish(reply))
    emit(PhaseChanged(Phase.PLANNING, False))
    if reply.model and reply.model != told_model:
        listener.on_model(reply.model)
    listener.on_usage(usage_of(reply, request, began=began, task_id=task_id))
    for message in messages:
        listener.on_message(message)
    calls = [block for block in reply.content if block.get("type") == "tool_use"]
    return ToolCalls(reply, messages, calls) if calls else Final(reply, messages)


def usage_of(reply: ModelReply, request: ModelRequest, *, began: float, task_id: str, purpose: str = "turn") -> Usage:
    """What a call that began at ``began`` (``time.monotonic()``) spent, as its listener hears it."""
    spent = reply.usage
    return Usage(
        model=reply.model or request.model,
        input_tokens=spent.input_tokens,
        output_tokens=spent.output_tokens,
        cache_read_tokens=spent.cache_read_tokens,
        cache_write_tokens=spent.cache_write_tokens,
        duration_seconds=time.monotonic() - began,
        task_id=task_id,
        purpose=purpose,
    )
