"""Session memory that heals: the history the model sees is always well formed."""

from __future__ import annotations

from typing import Any

INTERRUPTED = "interrupted: the run stopped before this tool returned a result"


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def heal_turns(turns: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """Returns a history the Messages API accepts, and the ids of the tool calls it closed.

    - a history never starts with tool results whose calls are gone;
    - every tool_use is answered: calls left open by a stopped process get a
      synthetic "interrupted" error result;
    - consecutive turns of one role are merged.
    """
    healed: list[dict[str, Any]] = []
    closed: list[str] = []
    for turn in turns:
        if not healed and turn["role"] == "user" and not isinstance(turn["content"], str):
            kept = [b for b in turn["content"] if b.get("type") != "tool_result"]
            if not kept:
                continue
            turn = {"role": "user", "content": kept}
        if not healed and turn["role"] == "assistant":
            continue
        if healed and healed[-1]["role"] == turn["role"]:
            healed[-1] = {"role": turn["role"], "content": _blocks(healed[-1]["content"]) + _blocks(turn["content"])}
        else:
            healed.append(turn)
    # Answer every open tool_use with a result in the turn that follows it.
    result: list[dict[str, Any]] = []
    for i, turn in enumerate(healed):
        result.append(turn)
        if turn["role"] != "assistant":
            continue
        calls = [b["id"] for b in _blocks(turn["content"]) if b.get("type") == "tool_use"]
        if not calls:
            continue
        following = healed[i + 1] if i + 1 < len(healed) else None
        answered = (
            {b.get("tool_use_id") for b in _blocks(following["content"]) if b.get("type") == "tool_result"}
            if following and following["role"] == "user"
            else set()
        )
        missing = [c for c in calls if c not in answered]
        if not missing:
            continue
        closed.extend(missing)
        synthetic = [
            {"type": "tool_result", "tool_use_id": c, "content": INTERRUPTED, "is_error": True} for c in missing
        ]
        if following and following["role"] == "user":
            healed[i + 1] = {"role": "user", "content": synthetic + _blocks(following["content"])}
        else:
            result.append({"role": "user", "content": synthetic})
    # Tool results must come first in their turn, before any text.
    for turn in result:
        if turn["role"] == "user" and not isinstance(turn["content"], str):
            blocks = turn["content"]
            turn["content"] = [b for b in blocks if b.get("type") == "tool_result"] + [
                b for b in blocks if b.get("type") != "tool_result"
            ]
    return result, closed
