"""A run taken over: another process goes on from the last step its dead process checkpointed.

Each step of a running run (the user's turn, each model turn, each tool call's result) is committed
with the run's checkpoint (orchestrator/waits.py ``Checkpoint``: the calls of the turn in flight that
have results, the loop's counters, the read ledger), so when the process dies, whoever takes the run
over finds the conversation and the checkpoint in step. What was in flight is decided here:

- a model turn in flight was never committed: the model is called again;
- a tool call whose result was stored keeps it;
- a read-only tool call without a result runs again: it changed nothing;
- any other call without a result (bash, writes, MCP tools that are not read-only, a sub-agent) is
  not run again blindly: the model reads that it was interrupted and that its effect is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.tools.base import ToolRegistry
from orchestrator.tools.subagent import SUB_AGENT
from orchestrator.waits import Checkpoint

INTERRUPTED_UNKNOWN = (
    "interrupted: the server process running this call stopped before its result was stored, and the "
    "run was taken over by another. Its effect is unknown: it may have run in full, in part or not at "
    "all. It was not run again; check what it would have changed before you repeat it."
)


@dataclass(slots=True, frozen=True)
class Takeover:
    """What a run goes on from in the process that took it over: its last step's checkpoint; or, taken
    over before its first step was committed, ``user_turn``: it starts over with that message."""

    checkpoint: Checkpoint
    user_turn: str | list[dict[str, Any]] | None = None


def calls_in_flight(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls of the model's last turn when no user turn answers them yet."""
    if not turns or turns[-1].get("role") != "assistant" or not isinstance(turns[-1].get("content"), list):
        return []
    return [block for block in turns[-1]["content"] if block.get("type") == "tool_use"]


def runs_again(call: dict[str, Any], tools: ToolRegistry) -> bool:
    """A call without a stored result that may simply be made again: a read-only tool's. A sub-agent
    is not, though its tool changes nothing itself: its children may have (their delegation fails)."""
    tool = tools.get(call["name"])
    return tool is not None and tool.read_only and tool is not SUB_AGENT
