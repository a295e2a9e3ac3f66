"""The listener contract of a run: on_finished exactly once, whatever ends it."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from orchestrator.events import BaseListener, Listeners, Outcome, RunEvent, RunInfo, TextDelta, Usage
from orchestrator.loop import AgentLoop, LoopConfig
from orchestrator.providers.anthropic import AnthropicProvider
from orchestrator.request import RunRequest
from orchestrator.tools.base import ToolContext, ToolRegistry, Workspace
from orchestrator.tools.readonly import READ_ONLY_TOOLS
from tests.fakes.anthropic_api import FakeAnthropic, text, text_turn, tool_turn, tool_use, turn
from threads.models import Run, Session, Thread
from threads.store import DbSessionStore


class Recorder(BaseListener):
    def __init__(self, stop_after: int | None = None) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.stop_after = stop_after
        self.polls = 0
        self.started: RunInfo | None = None

    def on_start(self, run: RunInfo) -> None:
        self.started = run
        self.calls.append(("start", run.run_id))

    def on_subscribe(self) -> None:
        self.calls.append(("subscribe", None))

    def on_model(self, model: str) -> None:
        self.calls.append(("model", model))

    def on_usage(self, usage: Usage) -> None:
        self.calls.append(("usage", usage.input_tokens))

    def on_error(self, error: BaseException, message: str) -> None:
        self.calls.append(("error", message))

    def on_finished(self, outcome: Outcome) -> None:
        self.calls.append(("finished", outcome))

    def should_continue(self) -> bool:
        self.polls += 1
        return self.stop_after is None or self.polls <= self.stop_after

    @property
    def finished(self) -> list[Outcome]:
        return [value for name, value in self.calls if name == "finished"]


@pytest.fixture
def store(coder):
    thread = Thread.objects.create(agui_thread_id="t-loop", agent=coder)
    session = Session.objects.create(thread=thread)
    run = Run.objects.create(thread=thread, agui_run_id="r-loop")
    return DbSessionStore(session_id=session.pk, thread_pk=thread.pk, run_pk=run.pk, turns=[])


async def _run(
    fake: FakeAnthropic,
    store: DbSessionStore,
    listener: Recorder | Listeners,
    tmp_path: Path,
    max_iterations: int = 10,
    token_budget: int = 0,
    request: RunRequest | None = None,
) -> Outcome:
    provider = AnthropicProvider(api_key="sk-fake", model="claude-sonnet-5-5", base_url=fake.base_url, max_retries=0)
    loop = AgentLoop(
        provider=provider,
        tools=ToolRegistry.of(READ_ONLY_TOOLS),
        tool_context=ToolContext(Workspace(tmp_path)),
        config=LoopConfig(
            model="claude-sonnet-5-5", max_iterations=max_iterations, token_budget=token_budget, stream_retries=0
        ),
        store=store,
        listener=listener,
    )
    try:
        request = request or RunRequest(request_id="r-loop", text="hi")
        return await loop.run(request, run_id="r-loop", thread_id="t-loop")
    finally:
        await provider.client.close()


async def test_success_finishes_once(store, tmp_path):
    with FakeAnthropic([tool_turn("glob", {"pattern": "*"}), text_turn(["done"])]) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path) is Outcome.SUCCESS
    assert recorder.calls[0] == ("start", "r-loop")
    assert recorder.finished == [Outcome.SUCCESS]
    assert recorder.calls[-1] == ("finished", Outcome.SUCCESS)
    session = await sync_to_async(Session.objects.get)(pk=store.session_id)
    assert [t["role"] for t in session.turns] == ["user", "assistant", "user", "assistant"]


async def test_on_model_names_the_model_once_while_the_one_asked_for_answers(store, tmp_path):
    with FakeAnthropic([tool_turn("glob", {"pattern": "*"}), text_turn(["done"])]) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path) is Outcome.SUCCESS
    assert recorder.calls[:2] == [("start", "r-loop"), ("model", "claude-sonnet-5-5")]
    assert [value for name, value in recorder.calls if name == "model"] == ["claude-sonnet-5-5"]


async def test_on_model_tells_when_another_model_answers(store, tmp_path):
    """on_model: the API resolved the alias to a dated model, and a listener is told which."""
    dated = "claude-sonnet-5-5-20261101"
    script = [tool_turn("glob", {"pattern": "*"}, model=dated), text_turn(["done"], model=dated)]
    with FakeAnthropic(script) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path) is Outcome.SUCCESS
    assert [value for name, value in recorder.calls if name == "model"] == ["claude-sonnet-5-5", dated]
    # Told before the usage of the call that answered with it.
    assert recorder.calls.index(("model", dated)) < recorder.calls.index(("usage", 25))


async def test_on_start_tells_the_request_s_user_parent_and_description(store, tmp_path):
    """The request reaches the listeners: whose run it is, and for a delegated run, which run
    delegated it and what it is for."""
    request = RunRequest(
        request_id="r-loop", text="hi", user_id="7", parent_request_id="r-parent", description="reader"
    )
    with FakeAnthropic([text_turn(["done"])]) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path, request=request) is Outcome.SUCCESS
    assert recorder.started == RunInfo(
        run_id="r-loop",
        thread_id="t-loop",
        model="claude-sonnet-5-5",
        user_id="7",
        parent_request_id="r-parent",
        description="reader",
    )


async def test_a_model_error_is_reported_then_finishes_once(store, tmp_path):
    with FakeAnthropic([text_turn(["x"]).error_mid_stream(after_events=4)]) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path) is Outcome.ERROR
    assert [name for name, _ in recorder.calls] == ["start", "model", "error", "finished"]
    assert recorder.finished == [Outcome.ERROR]


async def test_should_continue_false_cancels_mid_stream(store, tmp_path):
    with FakeAnthropic([tool_turn("glob", {"pattern": "*"}), text_turn(["never"])]) as fake:
        recorder = Recorder(stop_after=3)
        assert await _run(fake, store, recorder, tmp_path) is Outcome.CANCELLED
        assert len(fake.requests) == 1
    assert recorder.finished == [Outcome.CANCELLED]
    session = await sync_to_async(Session.objects.get)(pk=store.session_id)
    assert [t["role"] for t in session.turns] == ["user"]  # nothing of the cut reply is kept


async def test_a_limit_pauses_with_its_reason_and_keeps_the_checkpoint(store, tmp_path):
    with FakeAnthropic([tool_turn("glob", {"pattern": "*"}, input_tokens=500), text_turn(["never"])]) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path, token_budget=100) is Outcome.PAUSED
        assert len(fake.requests) == 1
    session = await sync_to_async(Session.objects.get)(pk=store.session_id)
    assert session.paused_reason == "token_budget"
    assert [t["role"] for t in session.turns] == ["user", "assistant", "user"]


async def test_the_same_call_three_times_in_a_row_is_stopped_as_a_loop(store, tmp_path):
    same = {"pattern": "*.md"}
    with FakeAnthropic(
        [tool_turn("glob", same), tool_turn("glob", same), tool_turn("glob", same), text_turn(["ok, something else"])]
    ) as fake:
        assert await _run(fake, store, Recorder(), tmp_path) is Outcome.SUCCESS
        results = [r.body["messages"][-1]["content"][0] for r in fake.requests[1:]]
    assert [r.get("is_error", False) for r in results] == [False, False, True]
    assert "looks like a loop" in results[2]["content"]


async def test_the_iteration_cap_pauses(store, tmp_path):
    with FakeAnthropic([tool_turn("glob", {"pattern": "*"}), tool_turn("glob", {"pattern": "*"})]) as fake:
        recorder = Recorder()
        assert await _run(fake, store, recorder, tmp_path, max_iterations=2) is Outcome.PAUSED
    assert recorder.finished == [Outcome.PAUSED]


async def test_a_cancelled_task_finishes_once_and_propagates(store, tmp_path):
    hanging = text_turn(["a", "b"]).pause(after_events=3)
    with FakeAnthropic([hanging]) as fake:
        recorder = Recorder()
        task = asyncio.create_task(_run(fake, store, recorder, tmp_path))
        await asyncio.to_thread(hanging.paused.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        hanging.resume.set()
    assert recorder.finished == [Outcome.CANCELLED]


async def test_request_listeners_hear_the_run_beside_the_loops(store, tmp_path):
    extra = Recorder()
    with FakeAnthropic([text_turn(["hi"])]) as fake:
        provider = AnthropicProvider(api_key="k", model="claude-sonnet-5-5", base_url=fake.base_url, max_retries=0)
        loop = AgentLoop(
            provider=provider,
            tools=ToolRegistry.of(READ_ONLY_TOOLS),
            tool_context=ToolContext(Workspace(tmp_path)),
            config=LoopConfig(model="claude-sonnet-5-5", system_prompt="You help {{user_name}} in {{team}}."),
            store=store,
            listener=Recorder(),
        )
        request = RunRequest(request_id="r-loop", text="hi", listeners=[extra], prompt_variables={"user_name": "Ada"})
        try:
            assert await loop.run(request, run_id="r-loop", thread_id="t-loop") is Outcome.SUCCESS
        finally:
            await provider.client.close()
        system = fake.requests[0].body["system"][0]["text"]
    assert extra.finished == [Outcome.SUCCESS]
    assert system == "You help Ada in {{team}}."


async def test_a_background_run_is_not_offered_tools_that_change_things(store, tmp_path):
    from orchestrator.request import BACKGROUND
    from orchestrator.tools.mutating import MUTATING_TOOLS

    with FakeAnthropic([tool_turn("bash", {"command": "touch hacked"}), text_turn(["ok"])]) as fake:
        provider = AnthropicProvider(api_key="k", model="claude-sonnet-5-5", base_url=fake.base_url, max_retries=0)
        loop = AgentLoop(
            provider=provider,
            tools=ToolRegistry.of((*READ_ONLY_TOOLS, *MUTATING_TOOLS)),
            tool_context=ToolContext(Workspace(tmp_path)),
            config=LoopConfig(model="claude-sonnet-5-5"),
            store=store,
            listener=Recorder(),
        )
        try:
            await loop.run(RunRequest(request_id="r", text="go", scenario=BACKGROUND), run_id="r", thread_id="t")
        finally:
            await provider.client.close()
        offered = [tool["name"] for tool in fake.requests[0].body["tools"]]
        refused = fake.requests[1].body["messages"][-1]["content"][0]
    assert offered == ["glob", "grep", "file_read"]
    assert refused["is_error"] and "unknown tool 'bash'" in refused["content"]
    assert not (tmp_path / "hacked").exists()


async def test_a_transient_tool_error_is_retried_once(tmp_path):
    from orchestrator.tools.base import Tool, ToolOutput

    calls = {"flaky": 0, "broken": 0}

    async def flaky(arguments, context):
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise BlockingIOError(11, "resource temporarily unavailable")
        return ToolOutput("worked the second time")

    async def broken(arguments, context):
        calls["broken"] += 1
        raise ValueError("a bug, not a hiccup")

    registry = ToolRegistry.of(
        [
            Tool("flaky", "", {"type": "object"}, flaky),
            Tool("broken", "", {"type": "object"}, broken),
        ]
    )
    context = ToolContext(Workspace(tmp_path))
    assert (await registry.call("flaky", {}, context)).content == "worked the second time"
    output = await registry.call("broken", {}, context)
    assert output.is_error and calls == {"flaky": 2, "broken": 1}


async def test_the_wall_clock_cap_pauses_at_the_next_boundary(store, tmp_path):
    slow = tool_turn("glob", {"pattern": "*"}).paced(0.05)
    with FakeAnthropic([slow, text_turn(["never"])]) as fake:
        provider = AnthropicProvider(api_key="k", model="claude-sonnet-5-5", base_url=fake.base_url, max_retries=0)
        loop = AgentLoop(
            provider=provider,
            tools=ToolRegistry.of(READ_ONLY_TOOLS),
            tool_context=ToolContext(Workspace(tmp_path)),
            config=LoopConfig(model="claude-sonnet-5-5", wall_clock_seconds=0.1),
            store=store,
            listener=Recorder(),
        )
        try:
            outcome = await loop.run(RunRequest(request_id="r", text="go"), run_id="r", thread_id="t")
        finally:
            await provider.client.close()
        assert len(fake.requests) == 1
    assert outcome is Outcome.PAUSED
    session = await sync_to_async(Session.objects.get)(pk=store.session_id)
    assert session.paused_reason == "wall_clock"


class Joiner(Recorder):
    """Subscribes ``late`` to the run once the first model call is counted."""

    def __init__(self, late: Recorder) -> None:
        super().__init__()
        self.late = late
        self.listeners = Listeners(self)

    def on_usage(self, usage: Usage) -> None:
        super().on_usage(usage)
        if not any(name == "subscribe" for name, _ in self.late.calls):
            self.listeners.subscribe(self.late)


async def test_a_listener_joining_a_run_in_flight_hears_on_subscribe_then_the_rest_and_finished_once(store, tmp_path):
    turns = [tool_turn("glob", {"pattern": "*"}, input_tokens=11), text_turn(["done"], input_tokens=22)]
    late = Recorder()
    joiner = Joiner(late)
    with FakeAnthropic(turns) as fake:
        assert await _run(fake, store, joiner.listeners, tmp_path) is Outcome.SUCCESS
    # No on_start (it was not there), the second call's usage (not the first's), one on_finished.
    assert late.calls == [("subscribe", None), ("usage", 22), ("finished", Outcome.SUCCESS)]


def test_a_listener_joining_a_finished_run_is_told_at_once():
    listeners = Listeners(Recorder())
    listeners.on_finished(Outcome.CANCELLED)
    late = Recorder()
    listeners.subscribe(late)
    assert late.calls == [("subscribe", None), ("finished", Outcome.CANCELLED)]
    assert late not in listeners.listeners


class Stopper(BaseListener):
    """Hears the stream's events and, once it has heard one, asks the run to stop."""

    def __init__(self) -> None:
        self.heard: list[RunEvent] = []

    def on_event(self, event: RunEvent) -> None:
        self.heard.append(event)

    def should_continue(self) -> bool:
        return not self.heard


def test_a_listener_joining_in_flight_hears_the_next_event_and_is_asked_whether_to_go_on():
    listeners = Listeners(Recorder(), BaseListener())
    assert listeners.should_continue()
    stopper = Stopper()
    listeners.subscribe(stopper)
    listeners.on_event(TextDelta("msg_1", "hi"))
    assert stopper.heard == [TextDelta("msg_1", "hi")]
    assert not listeners.should_continue()


class PiecesHeld(Recorder):
    """At the given text delta, what the provider and the loop's call stream hold, in bytes
    allocated by their own lines (tracemalloc)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.deltas = 0
        self.held = -1

    def on_event(self, event: RunEvent) -> None:
        if type(event) is TextDelta:
            self.deltas += 1
            if self.deltas == self.at:
                mine = [
                    tracemalloc.Filter(True, "*/orchestrator/providers/anthropic.py"),
                    tracemalloc.Filter(True, "*/orchestrator/callstream.py"),
                ]
                held = tracemalloc.take_snapshot().filter_traces(mine)
                self.held = sum(stat.size for stat in held.statistics("filename"))


async def test_a_long_reply_comes_out_whole_without_a_string_kept_per_token(store, tmp_path):
    # A text of 30,000 one-token deltas, then a call whose arguments come in 30,000 pieces: the
    # pieces are joined as they pile up, not each kept as a string of its own (about 60 bytes a
    # token, in the provider and again in the loop) until the block ends.
    words = [f"w{n} " for n in range(30_000)]
    pattern = "ab" * 30_000
    arguments = ['{"pattern": "', *["ab"] * 30_000, '"}']
    long_turn = turn(text(words), tool_use("glob", partial_json=arguments), stop_reason="tool_use")
    listener = PiecesHeld(at=29_000)
    with FakeAnthropic([long_turn, text_turn(["done"])]) as fake:
        tracemalloc.start()
        try:
            assert await _run(fake, store, listener, tmp_path) is Outcome.SUCCESS
        finally:
            tracemalloc.stop()
    session = await sync_to_async(Session.objects.get)(pk=store.session_id)
    reply = session.turns[1]["content"]
    assert [block["type"] for block in reply] == ["text", "tool_use"]
    assert reply[0]["text"] == "".join(words)
    assert reply[1]["input"] == {"pattern": pattern}
    print(f"held {listener.held / 2**20:.2f} MiB")
    assert 0 < listener.held < 2**20  # 29,000 pieces kept whole: 1.8 MiB


async def test_the_sdk_adapter_hands_over_a_read_as_one_list_in_order():
    """What one network read brought comes as one list (no generator step per token), and the
    lists in order are the reply's events, whole."""
    from orchestrator.providers.base import BlockDelta, BlockStart, BlockStop, ModelReply, ModelRequest

    tokens = [f"t{i} " for i in range(300)]
    with FakeAnthropic([text_turn(tokens).prepare()]) as fake:  # prepared: sent in one write
        provider = AnthropicProvider(api_key="k", model="claude-sonnet-5-5", base_url=fake.base_url, max_retries=0)
        try:
            request = ModelRequest(model="claude-sonnet-5-5", system="", messages=[], tools=[], max_tokens=10)
            items = [item async for item in provider.stream(request)]
        finally:
            await provider.client.close()
    *batches, reply = items
    assert type(reply) is ModelReply and reply.content[0]["text"] == "".join(tokens)
    assert all(type(batch) is list for batch in batches)
    assert len(batches) < len(tokens) / 10  # a few reads, not an item per token
    events = [event for batch in batches for event in batch]
    assert events == [BlockStart(0, "text"), *(BlockDelta(0, token) for token in tokens), BlockStop(0)]


async def test_a_cancel_inside_a_read_stops_at_that_token(store, tmp_path):
    """A read's events are taken one by one: should_continue is asked after each, and the run stops
    at the token it said no after, though the rest of the read is there."""

    class Counting(Recorder):
        deltas = 0
        at_no: int | None = None  # the deltas heard when should_continue first said no

        def on_event(self, event: RunEvent) -> None:
            if type(event) is TextDelta:
                self.deltas += 1

        def should_continue(self) -> bool:
            go_on = super().should_continue()
            if not go_on and self.at_no is None:
                self.at_no = self.deltas
            return go_on

    with FakeAnthropic([text_turn([f"t{i} " for i in range(300)]).prepare()]) as fake:
        recorder = Counting(stop_after=50)
        assert await _run(fake, store, recorder, tmp_path) is Outcome.CANCELLED
    assert recorder.at_no is not None and 0 < recorder.at_no < 300
    assert recorder.deltas == recorder.at_no  # not one token more
