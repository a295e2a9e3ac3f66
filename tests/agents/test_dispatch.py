"""dispatch.classify: each tool call becomes one typed step, which the loop matches once (orchestrator/dispatch.py)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator import dispatch
from orchestrator.request import DELEGATION, INTERACTIVE, Scenario
from orchestrator.tools.base import ToolKind, ToolRegistry
from orchestrator.tools.catalog import KNOWN_TOOLS, SERVER_TOOLS
from orchestrator.tools.client import add_client_tools


def _registry() -> ToolRegistry:
    tools = ToolRegistry.of(SERVER_TOOLS)
    add_client_tools(tools, [{"name": "show_chart", "parameters": {"type": "object"}}])
    return tools


def _classify(
    name: str, arguments: Any = None, *, scenario: Scenario = INTERACTIVE, grounded: bool = True, looping=False
):
    call = {"id": "c1", "name": name, "input": {} if arguments is None else arguments}
    return dispatch.classify(
        call, tools=_registry(), scenario=scenario, grounded=grounded, looping=looping, repeat_limit=3
    )


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("show_chart", dispatch.ClientCall),
        ("ask_user", dispatch.Question),
        ("grounding_report", dispatch.GroundingReport),
        ("sub_agent", dispatch.Delegate),
        ("file_read", dispatch.WorkspaceCall),
        ("bash", dispatch.WorkspaceCall),
        ("web_fetch", dispatch.WorkspaceCall),
    ],
)
def test_each_kind_of_call_gets_its_own_step(name, step):
    assert type(_classify(name, {"x": 1})) is step


def test_a_looping_call_is_refused_before_anything_else():
    step = _classify("ask_user", {"question": "again?"}, looping=True)
    assert isinstance(step, dispatch.Refused) and "3 times in a row" in step.output.content and step.output.is_error


def test_arguments_that_are_not_an_object_are_refused():
    step = _classify("file_read", ["a.py"])
    assert isinstance(step, dispatch.Refused) and step.output.content == "tool arguments must be a JSON object"


def test_a_tool_the_scenario_does_not_offer_is_unknown():
    assert isinstance(_classify("ask_user", scenario=DELEGATION), dispatch.Refused)
    step = _classify("nope")
    assert isinstance(step, dispatch.Refused) and step.output.content == "unknown tool 'nope'"


def test_the_closed_grounding_gate_refuses_what_changes_the_workspace_but_not_questions():
    step = _classify("file_write", {"path": "a", "content": ""}, grounded=False)
    assert isinstance(step, dispatch.Refused) and "grounding gate is closed" in step.output.content
    assert isinstance(_classify("file_write", {"path": "a", "content": ""}, grounded=True), dispatch.WorkspaceCall)
    assert isinstance(_classify("ask_user", {"question": "q"}, grounded=False), dispatch.Question)


def test_an_approved_sub_agent_call_delegates_and_any_other_runs_its_function():
    assert isinstance(dispatch.approved_call(KNOWN_TOOLS["sub_agent"], {}), dispatch.Delegate)
    assert isinstance(dispatch.approved_call(KNOWN_TOOLS["apply_patch"], {}), dispatch.WorkspaceCall)


def test_the_catalogue_says_who_carries_out_each_tool():
    run_handled = {name for name, tool in KNOWN_TOOLS.items() if tool.kind is ToolKind.RUN}
    assert run_handled == {"ask_user", "grounding_report", "sub_agent"}
    assert all(tool.kind is not ToolKind.CLIENT for tool in SERVER_TOOLS)
    assert _registry().tools["show_chart"].kind is ToolKind.CLIENT
    assert len(KNOWN_TOOLS) == len(SERVER_TOOLS)  # no two tools share a name
