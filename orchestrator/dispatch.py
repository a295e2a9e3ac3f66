"""What the loop does with one of the model's tool calls, decided in one place.

``classify`` turns a call into a small typed value, and one turn's tool calls match it once (orchestrator/toolcalls.py,
``_dispatch``), as openai-agents does with its typed next steps:

- ``Refused``: the call does not run; the model reads ``output`` (a loop, bad arguments, a tool it
  was not offered, a tool the grounding gate holds back);
- ``ClientCall``: the client runs it; the run waits for its result;
- ``Question``: ask_user, put to the person; the run waits for the reply;
- ``GroundingReport``: grounding_report, recorded by the run (and its question, if any, put to the
  person);
- ``Delegate``: sub_agent, a child run, once the permission policy allows it;
- ``WorkspaceCall``: a tool run here by its function, once the permission policy allows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.request import Scenario
from orchestrator.tools.ask import ASK_USER
from orchestrator.tools.base import Tool, ToolKind, ToolOutput, ToolRegistry
from orchestrator.tools.grounding import GROUNDING_REPORT, gate_allows, gate_refusal
from orchestrator.tools.subagent import SUB_AGENT


@dataclass(slots=True, frozen=True)
class Refused:
    output: ToolOutput


@dataclass(slots=True, frozen=True)
class ClientCall:
    tool: Tool


@dataclass(slots=True, frozen=True)
class Question:
    arguments: dict[str, Any]


@dataclass(slots=True, frozen=True)
class GroundingReport:
    arguments: dict[str, Any]


@dataclass(slots=True, frozen=True)
class Delegate:
    tool: Tool
    arguments: dict[str, Any]


@dataclass(slots=True, frozen=True)
class WorkspaceCall:
    tool: Tool
    arguments: dict[str, Any]


CallStep = Refused | ClientCall | Question | GroundingReport | Delegate | WorkspaceCall
ApprovedCall = Delegate | WorkspaceCall


def classify(
    call: dict[str, Any],
    *,
    tools: ToolRegistry,
    scenario: Scenario,
    grounded: bool,
    looping: bool,
    repeat_limit: int,
) -> CallStep:
    """What to do with ``call`` (``{id, name, input}``). ``looping``: it repeats the calls before it
    ``repeat_limit`` times in a row; ``grounded``: the grounding gate is open."""
    arguments = call.get("input")
    if looping:
        return Refused(
            ToolOutput(
                f"stopped: this is the same {call['name']} call with the same arguments "
                f"{repeat_limit} times in a row, which looks like a loop. "
                "Its result would not change; try something different or explain what is blocking you.",
                True,
            )
        )
    if not isinstance(arguments, dict):
        return Refused(ToolOutput("tool arguments must be a JSON object", True))
    tool = tools.get(call["name"])
    if tool is None or not scenario.offers(tool):
        return Refused(ToolOutput(f"unknown tool {call['name']!r}", True))
    if tool.kind is ToolKind.CLIENT:
        return ClientCall(tool)
    if tool.name == ASK_USER.name:
        return Question(arguments)
    if tool.name == GROUNDING_REPORT.name:
        return GroundingReport(arguments)
    if not gate_allows(tool, grounded=grounded):
        return Refused(gate_refusal(tool))
    if tool.check is not None and (problem := tool.check(arguments)) is not None:
        return Refused(ToolOutput(problem, True))
    return approved_call(tool, arguments)


def approved_call(tool: Tool, arguments: dict[str, Any]) -> ApprovedCall:
    """What a call the permission policy has to allow runs as: a child run, or the tool's function."""
    if tool.name == SUB_AGENT.name:
        return Delegate(tool, arguments)
    return WorkspaceCall(tool, arguments)
