"""The phases grounding, waiting_approval and paused reach the clients as STEP events, paired, and
both real clients' verifiers accept them."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.sse import EVENT

pytestmark = pytest.mark.clients
VERSIONS = ["1", "0"]


def _steps(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["type"], e["stepName"]) for e in result["received"] if e["type"].startswith("STEP_")]


def _valid(result: dict[str, Any]) -> None:
    assert result["error"] is None, result["error"]
    for event in result["received"]:
        EVENT.validate_python(event)
    open_steps: set[str] = set()
    for kind, name in _steps(result):
        if kind == "STEP_STARTED":
            assert name not in open_steps
            open_steps.add(name)
        else:
            open_steps.remove(name)
    assert not open_steps


def _first(server: Any, version: str, thread_id: str, text: str) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": text}]}


@pytest.mark.parametrize("version", VERSIONS)
def test_the_grounding_phase_is_a_step_until_the_gate_opens(server, fake_api, coder, version):
    coder.grounding_mode = "enforced"
    coder.save()
    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*"}),
            tool_turn("grounding_report", {"understood": True, "relevant_files": ["README.md"]}),
            text_turn(["Grounded."]),
        ]
    )
    (result,) = run_client(
        version, f"{server.url}/agui/coder", "test-token", [_first(server, version, f"t-step-g-{version}", "go")]
    )
    server.drain()
    _valid(result)
    steps = _steps(result)
    assert steps[0] == ("STEP_STARTED", "grounding")
    opened, closed = steps.index(("STEP_STARTED", "grounding")), steps.index(("STEP_FINISHED", "grounding"))
    # It spans the model calls and tools of the grounding, and closes with the understood report.
    assert ("STEP_STARTED", "planning") in steps[opened:closed] and ("STEP_STARTED", "executing") in steps[
        opened:closed
    ]
    assert ("STEP_STARTED", "grounding") not in steps[closed:]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_gate_opening_at_the_iteration_cap_closes_the_step(server, fake_api, coder, version):
    coder.grounding_mode = "enforced"
    coder.save()
    fake_api.script([tool_turn("glob", {"pattern": "*"}), tool_turn("glob", {"pattern": "*.md"}), text_turn(["ok"])])
    with override_settings(GROUNDING_MAX_ITERATIONS=1):
        (result,) = run_client(
            version, f"{server.url}/agui/coder", "test-token", [_first(server, version, f"t-step-gc-{version}", "go")]
        )
        server.drain()
    _valid(result)
    assert ("STEP_FINISHED", "grounding") in _steps(result)
    assert "file_write" in [t["name"] for t in fake_api.requests[1].body["tools"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_waiting_for_an_approval_is_a_step_closed_before_the_interrupt(server, fake_api, workspace, version):
    fake_api.script([tool_turn("file_write", {"path": "n.txt", "content": "x\n"}, id="toolu_w"), text_turn(["ok"])])
    first = _first(server, version, f"t-step-w-{version}", "write")
    second = {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}}
    asked, resumed = run_client(version, f"{server.url}/agui/coder", "test-token", [first, second])
    server.drain()
    _valid(asked)
    _valid(resumed)
    types = [e["type"] for e in asked["received"]]
    waiting = [i for i, e in enumerate(asked["received"]) if e.get("stepName") == "waiting_approval"]
    assert [types[i] for i in waiting] == ["STEP_STARTED", "STEP_FINISHED"]
    assert waiting[1] < types.index("RUN_FINISHED")
    assert asked["received"][-1]["outcome"]["type"] == "interrupt"
    assert (workspace / "n.txt").read_text() == "x\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_pause_is_a_step(server, fake_api, coder, version):
    coder.max_iterations = 1
    coder.save()
    fake_api.script([tool_turn("glob", {"pattern": "*"}), text_turn(["never"])])
    (result,) = run_client(
        version, f"{server.url}/agui/coder", "test-token", [_first(server, version, f"t-step-p-{version}", "go")]
    )
    server.drain()
    _valid(result)
    assert _steps(result)[-2:] == [("STEP_STARTED", "paused"), ("STEP_FINISHED", "paused")]
    custom = next(e for e in result["received"] if e["type"] == "CUSTOM")
    assert custom == {"type": "CUSTOM", "name": "threadline.paused", "value": {"reason": "max_iterations"}}
