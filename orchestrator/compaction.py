"""Compaction: older turns summarised by the model, so a long session stays inside the window.

Only the model's view is compacted; the thread's transcript keeps everything.
The kept tail starts at an assistant turn, after the summary's user turn, so
every tool_use in it is still answered by the tool_result that follows it and
no tool_result is left without its call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.events import COMPACTION, Compacted, Phase, PhaseChanged, RunListener
from orchestrator.modelcall import usage_of
from orchestrator.providers.base import ModelError, ModelProvider, ModelReply, ModelRequest, TokenCount
from orchestrator.steps import LoopConfig, Progress

log = logging.getLogger(__name__)

SUMMARY_PROMPT = """You are summarising the earlier part of a conversation between a user and a coding \
assistant that works in a repository with tools. Write a summary the assistant can continue from \
without the original turns: the user's goals and constraints, decisions made, files read or changed \
(with paths), commands run and their outcomes, errors met, and what was about to happen next. Keep \
exact identifiers, paths and numbers. Be complete but concise; write plain text, no preamble."""

RESULT_EXCERPT = 2000


def estimate_tokens(turns: list[dict[str, Any]]) -> int:
    """A rough count (four characters a token) for turns the model has not yet counted."""
    return len(json.dumps(turns, ensure_ascii=False)) // 4


def split_point(turns: list[dict[str, Any]], keep_turns: int) -> int | None:
    """Where the kept tail starts: the first assistant turn among the last ``keep_turns``, or None."""
    for index in range(max(2, len(turns) - keep_turns), len(turns)):
        if turns[index]["role"] == "assistant":
            return index
    return None


def _render_block(role: str, block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return f"{role}: {block['text']}"
    if kind == "tool_use":
        return f"{role} called {block['name']}({json.dumps(block.get('input'), ensure_ascii=False)})"
    if kind == "tool_result":
        content = block.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if len(text) > RESULT_EXCERPT:
            text = text[:RESULT_EXCERPT] + f"... [{len(text) - RESULT_EXCERPT} more characters]"
        status = "error" if block.get("is_error") else "result"
        return f"Tool {status}: {text}"
    return f"{role}: [{kind} content]"  # thinking, images, documents: named, not copied


def render_for_summary(turns: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    for turn in turns:
        role = "User" if turn["role"] == "user" else "Assistant"
        content = turn["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        lines.extend(_render_block(role, block) for block in blocks)
    return "\n\n".join(lines)


def compacted(summary: str, tail: list[dict[str, Any]]) -> list[dict[str, Any]]:
    note = (
        f"<conversation-summary>\n{summary}\n</conversation-summary>\n\n"
        "The earlier part of this conversation was summarised above to save space; continue from it."
    )
    return [{"role": "user", "content": [{"type": "text", "text": note}]}, *tail]


@dataclass(slots=True, frozen=True)
class Compaction:
    """The turns with the older ones summarised, and what the summary cost."""

    turns: list[dict[str, Any]]
    usage: TokenCount


async def compact(
    provider: ModelProvider,
    turns: list[dict[str, Any]],
    *,
    model: str,
    max_tokens: int,
    keep_turns: int,
    listener: RunListener,
    task_id: str = "",
) -> Compaction | None:
    """Summarises the turns before the kept tail; None when there is nothing to compact or it failed
    (the run goes on uncompacted). A summary's call is reported to ``listener`` as a ``compaction``
    call; its tokens count on the run's spend with the turns it replaced (the loop commits them)."""
    emit = listener.on_event
    split = split_point(turns, keep_turns)
    if split is None:
        return None
    emit(PhaseChanged(Phase.COMPACTING, True))
    began = time.monotonic()
    request = ModelRequest(
        model=model,
        system=SUMMARY_PROMPT,
        messages=[{"role": "user", "content": render_for_summary(turns[:split])}],
        tools=[],
        max_tokens=min(max_tokens, 4096),
        # Its own prefix, sent once: a cache entry written for it would never be read.
        cache_conversation=False,
    )
    reply: ModelReply | None = None
    try:
        async with contextlib.aclosing(provider.stream(request)) as stream:
            async for item in stream:
                if type(item) is ModelReply:
                    reply = item
    except ModelError as exc:
        log.warning("compaction failed (%s); the run goes on uncompacted", exc.message)
    finally:
        emit(PhaseChanged(Phase.COMPACTING, False))
    summary = "".join(b["text"] for b in reply.content if b.get("type") == "text") if reply else ""
    if not summary.strip() or reply is None:
        return None
    listener.on_usage(usage_of(reply, request, began=began, task_id=task_id, purpose=COMPACTION))
    emit(Compacted(dropped_turns=split, duration_seconds=time.monotonic() - began))
    return Compaction(compacted(summary, turns[split:]), reply.usage)


async def compact_if_due(
    provider: ModelProvider, run: Progress, config: LoopConfig, *, listener: RunListener, task_id: str = ""
) -> Compaction | None:
    """Before a call whose prompt would pass the configured share of the window, the older turns of
    ``run`` are summarised and the run goes on with the summary, its tokens on the run's tally.
    None when it is not due, or the summary could not be made (the run goes on as it was)."""
    prompt = run.counted + estimate_tokens(run.turns[run.counted_upto :])
    if prompt < config.compact_at * config.context_window:
        return None
    compaction = await compact(
        provider,
        run.turns,
        model=config.model,
        max_tokens=config.max_tokens,
        keep_turns=config.keep_turns,
        listener=listener,
        task_id=task_id,
    )
    if compaction is None:
        return None
    run.turns = compaction.turns
    run.spend(compaction.usage)
    run.counted, run.counted_upto = 0, 0
    return compaction
