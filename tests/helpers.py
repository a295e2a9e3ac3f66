"""Small helpers shared by the tests."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

_REPEATING = {"TEXT_MESSAGE_CONTENT", "TOOL_CALL_ARGS", "REASONING_MESSAGE_CONTENT"}
_ids = itertools.count(1)


def squash(types: list[str]) -> list[str]:
    """Collapses runs of a streamed-content type into one ``TYPE*`` entry, so sequences read as protocol."""
    out: list[str] = []
    for kind, group in itertools.groupby(types):
        n = len(list(group))
        out.append(f"{kind}*" if kind in _REPEATING else kind)
        if kind not in _REPEATING and n > 1:
            out.extend([kind] * (n - 1))
    return out


def user(text: str | list[dict[str, Any]], message_id: str | None = None) -> dict[str, Any]:
    return {"id": message_id or f"u{next(_ids)}", "role": "user", "content": text}


def run_input(thread_id: str, run_id: str, *messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": run_id, "messages": list(messages), **extra}


def v1(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "protocolVersion": "1.0"}


def eventually(check: Callable[[], Any], *, seconds: float = 20, what: str = "the condition") -> Any:
    """Polls ``check`` until it returns something truthy (work another process or the sweep does
    in the background); fails after ``seconds``. A bound on waiting, not a timing assertion."""
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds} s"
        time.sleep(0.05)


def unmarked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's conversation without its prompt-cache breakpoints (orchestrator/providers/caching.py):
    what the model reads. A turn's content is a list of blocks, as the provider always sends it."""
    return [
        {
            **message,
            "content": [{k: v for k, v in block.items() if k != "cache_control"} for block in message["content"]],
        }
        for message in messages
    ]
