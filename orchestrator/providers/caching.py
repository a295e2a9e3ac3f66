"""Where a Messages request asks the prompt cache to keep its prefix: the conversation's breakpoints.

The API takes at most four ``cache_control`` breakpoints a request. The provider spends two on the
stable prefix of every call (the system prompt, the tool definitions) and these two on the
conversation:

- the end of the conversation this call sends, so the next call (of this run, or the next turn of
  the thread) reads everything up to here from the cache and pays full price only for what is new;
- the end of the conversation the previous call sent (the last user turn before the model's latest
  reply), where the previous call wrote its entry, so this call reads it even when the turn added
  since holds more blocks than the cache's lookback from one breakpoint reaches (about twenty).

Breakpoints go on the request's copy only: the session's stored turns never carry them, and
thinking blocks (which take none) go back exactly as the model sent them. A turn stored as a plain
string is sent as its one text block, always, so a turn reads the same whether it carries a
breakpoint in this call or not.
"""

from __future__ import annotations

from typing import Any

EPHEMERAL = {"type": "ephemeral"}

# Blocks that cannot carry a breakpoint: the model's thinking (sent back unmodified, and the API
# refuses cache_control on it).
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def mark_conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with breakpoints at the end of this call's conversation and of the previous
    call's; the list and the turns it marks are copies, the others are shared."""
    marked = [_as_blocks(turn) for turn in messages]
    for index in _user_turn_ends(messages):
        turn = _with_breakpoint(marked[index])
        if turn is not None:
            marked[index] = turn
    return marked


def _user_turn_ends(messages: list[dict[str, Any]]) -> list[int]:
    """The last turn, and the last user turn before the model's latest reply (the end of what the
    previous call sent), when there is one."""
    if not messages:
        return []
    last = len(messages) - 1
    ends = [last]
    replied = next((i for i in range(last, -1, -1) if messages[i]["role"] == "assistant"), None)
    if replied is not None:
        previous = next((i for i in range(replied - 1, -1, -1) if messages[i]["role"] == "user"), None)
        if previous is not None:
            ends.append(previous)
    return ends


def _as_blocks(turn: dict[str, Any]) -> dict[str, Any]:
    content = turn["content"]
    if isinstance(content, str) and content:
        return {**turn, "content": [{"type": "text", "text": content}]}
    return turn


def _with_breakpoint(turn: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of ``turn`` with a breakpoint on its last block that can carry one, or None when
    none can (an empty text, only thinking)."""
    content = turn["content"]
    if isinstance(content, str):
        return None  # empty (a string with text was made a block)
    for position in range(len(content) - 1, -1, -1):
        block = content[position]
        kind = block.get("type")
        if kind in _UNMARKABLE or (kind == "text" and not block.get("text")):
            continue
        blocks = list(content)
        blocks[position] = {**block, "cache_control": EPHEMERAL}
        return {**turn, "content": blocks}
    return None
