"""A step is the unit that survives (issue #45): each model turn and each tool call's result is in the
database with the run's checkpoint the moment it is committed, and a loop taken over goes on from it.

The loop runs in this process against the database and the fake Messages API; the tools that look at
the database while the run is in flight are tools of the test's own, in the loop's registry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from orchestrator.events import BaseListener, Outcome, RunEvent, ToolResult
from orchestrator.loop import AgentLoop, LoopConfig
from orchestrator.providers.anthropic import AnthropicProvider
from orchestrator.request import RunRequest
from orchestrator.takeover import INTERRUPTED_UNKNOWN, Takeover
from orchestrator.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry, Workspace
from orchestrator.tools.readonly import READ_ONLY_TOOLS
from orchestrator.tools.shell import BASH
from orchestrator.waits import Checkpoint, Counters
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_use, turn
from tests.helpers import unmarked
from threads.models import Message, Run, Session, Thread
from threads.store import DbSessionStore

NO_INPUT = {"type": "object", "properties": {}}


class Results(BaseListener):
    """Hears the results as they are reported."""

    def __init__(self) -> None:
        self.reported: dict[str, asyncio.Event] = {}

    def on_event(self, event: RunEvent) -> None:
        if isinstance(event, ToolResult):
            self.reported.setdefault(event.tool_call_id, asyncio.Event()).set()

    def reported_event(self, call_id: str) -> asyncio.Event:
        return self.reported.setdefault(call_id, asyncio.Event())


def _stored(run_pk: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's checkpoint record, its session's turns and its thread's transcript, as committed."""
    run = Run.objects.select_related("thread__session").get(pk=run_pk)
    transcript = list(Message.objects.filter(thread=run.thread).order_by("position").values_list("body", flat=True))
    return run.checkpoint or {}, run.thread.session.turns, transcript


@pytest.fixture
def store(coder: Any) -> DbSessionStore:
    thread = Thread.objects.create(agui_thread_id="t-steps", agent=coder)
    session = Session.objects.create(thread=thread)
    run = Run.objects.create(thread=thread, agui_run_id="r-steps")
    return DbSessionStore(session_id=session.pk, thread_pk=thread.pk, run_pk=run.pk, turns=[])


async def _run(
    fake: FakeAnthropic,
    store: DbSessionStore,
    tools: list[Tool],
    tmp_path: Path,
    listener: BaseListener,
    takeover: Takeover | None = None,
) -> Outcome:
    provider = AnthropicProvider(api_key="sk-fake", model="claude-sonnet-5-5", base_url=fake.base_url, max_retries=0)
    loop = AgentLoop(
        provider=provider,
        tools=ToolRegistry.of([*READ_ONLY_TOOLS, *tools]),
        tool_context=ToolContext(Workspace(tmp_path)),
        config=LoopConfig(model="claude-sonnet-5-5", stream_retries=0),
        store=store,
        listener=listener,
    )
    try:
        request = RunRequest(request_id="r-steps", text="" if takeover else "go")
        outcome = await loop.run(request, run_id="r-steps", thread_id="t-steps", takeover=takeover)
        assert isinstance(outcome, Outcome)
        return outcome
    finally:
        await provider.client.close()


async def test_the_model_turn_is_committed_with_the_runs_checkpoint_before_its_calls_run(store, tmp_path):
    seen: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    async def peek(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        record, turns, _ = await sync_to_async(_stored)(store.run_pk)
        seen.append((record, turns))
        return ToolOutput("looked")

    script = [turn(tool_use("peek", {}, id="toolu_p")), text_turn(["done"])]
    with FakeAnthropic(script) as fake:
        tool = Tool("peek", "Looks at the database.", NO_INPUT, peek)
        assert await _run(fake, store, [tool], tmp_path, BaseListener()) is Outcome.SUCCESS
    ((record, turns),) = seen
    assert turns[-1]["role"] == "assistant" and turns[-1]["content"][-1]["id"] == "toolu_p"
    assert record["step"]["done"] == {} and record["step"]["counters"]["iteration"] == 0
    assert record["clientTools"] == []
    # The run's last step: the final turn, one iteration on.
    record, turns, _ = await sync_to_async(_stored)(store.run_pk)
    assert record["step"]["counters"]["iteration"] == 1 and turns[-1]["role"] == "assistant"


async def test_each_call_s_result_is_stored_with_the_checkpoint_before_it_is_reported(store, tmp_path):
    """Of two parallel calls, the first's result is in the transcript and the checkpoint by the time
    it is reported, while the second still runs: a process dying then loses neither."""
    results = Results()
    seen: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    async def quick(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput("quick result")

    async def slow(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
        await results.reported_event("toolu_q").wait()
        record, _, transcript = await sync_to_async(_stored)(store.run_pk)
        seen.append((record, transcript))
        return ToolOutput("slow result")

    script = [turn(tool_use("quick", {}, id="toolu_q"), tool_use("slow", {}, id="toolu_s")), text_turn(["done"])]
    with FakeAnthropic(script) as fake:
        tools = [Tool("quick", "Quick.", NO_INPUT, quick), Tool("slow", "Slow.", NO_INPUT, slow)]
        assert await _run(fake, store, tools, tmp_path, results) is Outcome.SUCCESS
    ((record, transcript),) = seen
    assert list(record["step"]["done"]) == ["toolu_q"]
    assert record["step"]["done"]["toolu_q"]["content"] == "quick result"
    assert [m.get("toolCallId") for m in transcript if m["role"] == "tool"] == ["toolu_q"]


async def test_a_loop_taken_over_runs_read_only_calls_again_and_fails_the_others_as_unknown(store, tmp_path):
    """The dead process committed a turn of three calls and one result; the loop that takes over keeps
    that result, runs the read-only call again, tells the model bash's effect is unknown, and goes on."""
    (tmp_path / "notes.txt").write_text("the notes\n")
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_g", "name": "glob", "input": {"pattern": "*.txt"}},
                {"type": "tool_use", "id": "toolu_r", "name": "file_read", "input": {"path": "notes.txt"}},
                {"type": "tool_use", "id": "toolu_b", "name": "bash", "input": {"command": "touch ran"}},
            ],
        },
    ]
    store.turns = turns
    done = {"toolu_g": {"content": "notes.txt", "is_error": False, "message_id": "tool_g"}}
    checkpoint = Checkpoint.from_json({"done": done, "counters": {"iteration": 3, "tokens": 100}})
    with FakeAnthropic([text_turn(["Checked."])]) as fake:
        outcome = await _run(fake, store, [BASH], tmp_path, BaseListener(), Takeover(checkpoint))
        answered = unmarked(fake.requests[0].body["messages"])[-1]["content"]
    assert outcome is Outcome.SUCCESS
    assert not (tmp_path / "ran").exists()
    by_call = {block["tool_use_id"]: block for block in answered}
    assert by_call["toolu_g"]["content"] == "notes.txt"  # stored by the dead process: kept as it was
    assert "the notes" in json.dumps(by_call["toolu_r"]["content"])  # read-only: run again
    assert by_call["toolu_b"] == {
        "type": "tool_result",
        "tool_use_id": "toolu_b",
        "content": INTERRUPTED_UNKNOWN,
        "is_error": True,
    }
    record, turns_now, _ = await sync_to_async(_stored)(store.run_pk)
    assert Counters(**record["step"]["counters"]).iteration == 4  # the counters went on from the checkpoint
    assert [t["role"] for t in turns_now] == ["user", "assistant", "user", "assistant"]
