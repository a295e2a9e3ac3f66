"""The exact AG-UI event sequence of each kind of run, with the model behind the real SDK."""

from __future__ import annotations

import orjson
import pytest

from tests.eventlogs import logged as logged_events
from tests.fakes.anthropic_api import split_tokens, text, text_turn, thinking, tool_turn, tool_use, turn
from tests.helpers import run_input, squash, user, v1
from tests.sse import post_run
from threads.models import Message, Run, Thread

START = ["RUN_STARTED", "STATE_SNAPSHOT"]
TEXT = ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT*", "TEXT_MESSAGE_END"]


def test_plain_chat(server, fake_api):
    fake_api.script([text_turn(split_tokens("Hello there, how can I help?"))])
    stream = post_run(server.url, "coder", v1(run_input("t-chat", "r1", user("hi"))))
    assert stream.status == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    assert stream.headers["cache-control"] == "no-cache"
    assert stream.headers["x-accel-buffering"] == "no"
    assert squash(stream.types) == [
        *START,
        "STEP_STARTED",
        *TEXT,
        "STEP_FINISHED",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    text_out = "".join(e["delta"] for e in stream.events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text_out == "Hello there, how can I help?"
    assert stream.events[0] == {"type": "RUN_STARTED", "threadId": "t-chat", "runId": "r1", "protocolVersion": "1.0"}
    assert stream.events[-1]["outcome"] == {"type": "success"}
    assert [f.id for f in stream.frames] == list(range(1, len(stream.frames) + 1))


def test_backend_tool_call(server, fake_api):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "README.md"}, preamble=["Let me ", "read it."]),
            text_turn(["It is ", "a demo."]),
        ]
    )
    stream = post_run(server.url, "coder", v1(run_input("t-tool", "r1", user("read the readme"))))
    assert squash(stream.types) == [
        *START,
        "STEP_STARTED",
        *TEXT,
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS*",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STATE_DELTA",
        "STEP_STARTED",
        "TOOL_CALL_RESULT",
        "STATE_DELTA",
        "STEP_FINISHED",
        "STEP_STARTED",
        *TEXT,
        "STEP_FINISHED",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    start = next(e for e in stream.events if e["type"] == "TOOL_CALL_START")
    text_start = next(e for e in stream.events if e["type"] == "TEXT_MESSAGE_START")
    assert start["toolCallName"] == "file_read"
    assert start["parentMessageId"] == text_start["messageId"]
    args = "".join(e["delta"] for e in stream.events if e["type"] == "TOOL_CALL_ARGS")
    assert orjson.loads(args) == {"path": "README.md"}
    result = next(e for e in stream.events if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == start["toolCallId"]
    assert "# Demo project" in result["content"]
    files_delta = [e for e in stream.events if e["type"] == "STATE_DELTA" and e["delta"][0]["path"] == "/files/-"]
    assert files_delta[0]["delta"] == [
        {"op": "add", "path": "/files/-", "value": {"path": "README.md", "name": "README.md", "action": "read"}}
    ]
    # The model's second call saw the tool result, paired with its call.
    second = fake_api.requests[1].body["messages"]
    assert second[-1]["role"] == "user"
    assert second[-1]["content"][0]["type"] == "tool_result"
    assert second[-1]["content"][0]["tool_use_id"] == start["toolCallId"]
    assert "# Demo project" in second[-1]["content"][0]["content"]


def test_parallel_tool_calls(server, fake_api):
    fake_api.script(
        [
            turn(tool_use("glob", {"pattern": "**/*.py"}), tool_use("file_read", {"path": "src/app.py"})),
            text_turn(["Done."]),
        ]
    )
    stream = post_run(server.url, "coder", v1(run_input("t-par", "r1", user("look"))))
    starts = [e["toolCallId"] for e in stream.events if e["type"] == "TOOL_CALL_START"]
    finished = [e["toolCallId"] for e in stream.events if e["type"] == "TOOL_CALL_RESULT"]
    # The two calls run concurrently; the file_read result brings a files delta right after it.
    results = (
        ["TOOL_CALL_RESULT", "TOOL_CALL_RESULT", "STATE_DELTA"]
        if finished == starts
        else ["TOOL_CALL_RESULT", "STATE_DELTA", "TOOL_CALL_RESULT"]
    )
    assert squash(stream.types) == [
        *START,
        "STEP_STARTED",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS*",
        "TOOL_CALL_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS*",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STATE_DELTA",
        "STEP_STARTED",
        *results,
        "STEP_FINISHED",
        "STEP_STARTED",
        *TEXT,
        "STEP_FINISHED",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    starts = [e["toolCallId"] for e in stream.events if e["type"] == "TOOL_CALL_START"]
    results = {e["toolCallId"]: e["content"] for e in stream.events if e["type"] == "TOOL_CALL_RESULT"}
    assert len(set(starts)) == 2 and set(results) == set(starts)
    assert results[starts[0]] == "src/app.py"
    assert "def main" in results[starts[1]]
    answered = fake_api.requests[1].body["messages"][-1]["content"]
    assert [b["tool_use_id"] for b in answered] == starts


@pytest.fixture
def thinking_agent(coder):
    coder.thinking_budget = 2048
    coder.save()
    return coder


def test_reasoning(server, fake_api, thinking_agent):
    fake_api.script([turn(thinking(["Let me ", "think."]), text(["Answer."]))])
    stream = post_run(server.url, "coder", v1(run_input("t-think", "r1", user("why?"))))
    assert squash(stream.types) == [
        *START,
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT*",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        *TEXT,
        "STEP_FINISHED",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    body = fake_api.requests[0].body
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] > 2048
    # The thinking block goes back to the API unmodified, signature included.
    fake_api.script([text_turn(["Again."])])
    post_run(server.url, "coder", v1(run_input("t-think", "r2", user("why?", "u-why"), user("and?"))))
    history = fake_api.requests[1].body["messages"]
    assert history[1]["content"][0] == {
        "type": "thinking",
        "thinking": "Let me think.",
        "signature": "ZmFrZS1zaWduYXR1cmUtZm9yLXRlc3Rz",
    }


def test_provider_error_mid_stream_closes_what_is_open(server, fake_api):
    fake_api.script([text_turn(["Partial ", "answer ", "then"]).error_mid_stream(after_events=5)])
    stream = post_run(server.url, "coder", v1(run_input("t-err", "r1", user("hi"))))
    assert squash(stream.types) == [*START, "STEP_STARTED", *TEXT, "STEP_FINISHED", "RUN_ERROR"]
    error = stream.events[-1]
    assert error["code"] == "overloaded_error"
    assert "Overloaded" in error["message"]
    server.drain()
    run = Run.objects.get(agui_run_id="r1")
    assert run.status == Run.Status.FAILED
    assert run.event_count == len(stream.frames)
    assert len(logged_events(run)) == len(stream.frames)


def test_provider_error_before_any_output_is_retried(server, fake_api):
    fake_api.script(
        [
            text_turn(["never shown"]).error_mid_stream(after_events=2),
            text_turn(["never shown"]).drop_connection(after_events=2),
            text_turn(["Recovered."]),
        ]
    )
    stream = post_run(server.url, "coder", v1(run_input("t-retry", "r1", user("hi"))))
    assert squash(stream.types) == [*START, "STEP_STARTED", *TEXT, "STEP_FINISHED", "STATE_DELTA", "RUN_FINISHED"]
    assert "".join(e["delta"] for e in stream.events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Recovered."
    assert len(fake_api.requests) == 3


def test_early_end_after_output_is_a_clean_error(server, fake_api):
    fake_api.script([text_turn(["Half ", "a ", "reply"]).end_early(after_events=5)])
    stream = post_run(server.url, "coder", v1(run_input("t-early", "r1", user("hi"))))
    assert squash(stream.types) == [*START, "STEP_STARTED", *TEXT, "STEP_FINISHED", "RUN_ERROR"]
    assert stream.events[-1]["code"] == "early_end"


def test_dropped_connection_after_output_is_a_clean_error(server, fake_api):
    fake_api.script([text_turn(["Half ", "a ", "reply"]).drop_connection(after_events=5)])
    stream = post_run(server.url, "coder", v1(run_input("t-drop", "r1", user("hi"))))
    assert squash(stream.types) == [*START, "STEP_STARTED", *TEXT, "STEP_FINISHED", "RUN_ERROR"]
    assert stream.events[-1]["code"] == "connection"


def test_tool_calls_reported_only_at_the_end_are_reconstructed(server):
    """The offline demo model reports its tool calls only in its final reply, never streamed."""
    stream = post_run(server.url, "coder", v1(run_input("t-late", "r1", user("what is this?"))))
    types = squash(stream.types)
    assert types[:10] == [
        *START,
        "STEP_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT*",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        *TEXT[:2],
    ]
    first_call = types.index("TOOL_CALL_START")
    assert types[first_call : first_call + 7] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS*",
        "TOOL_CALL_END",
        "STEP_FINISHED",
        "STATE_DELTA",
        "STEP_STARTED",
        "TOOL_CALL_RESULT",
    ]
    assert types[-1] == "RUN_FINISHED"
    args = next(e for e in stream.events if e["type"] == "TOOL_CALL_ARGS")
    assert orjson.loads(args["delta"]) == {"pattern": "*"}


def test_the_run_is_persisted(server, fake_api):
    fake_api.script([tool_turn("glob", {"pattern": "*.md"}), text_turn(["One file."])])
    stream = post_run(server.url, "coder", v1(run_input("t-persist", "r1", user("list", "u-list"))))
    server.drain()
    thread = Thread.objects.get(agui_thread_id="t-persist")
    assert thread.title == "list"
    run = Run.objects.get(thread=thread)
    assert run.status == Run.Status.SUCCEEDED
    assert run.input_tokens == 50  # two model calls of 25 input tokens
    logged = logged_events(run)
    assert [e.seq for e in logged] == list(range(1, len(stream.frames) + 1))
    assert [e.payload.encode() for e in logged] == [f.raw for f in stream.frames]
    roles = list(Message.objects.filter(thread=thread).order_by("position").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert thread.session.turns[0] == {"role": "user", "content": "list"}
    assert thread.state["tokenUsage"]["totalPromptTokens"] == 50
    assert thread.state["tokenUsage"]["promptTokens"] == 25  # the live context: the latest call's prompt


def test_only_the_trailing_user_message_is_forwarded_with_context_first(server, fake_api):
    fake_api.script([text_turn(["ok"])])
    body = v1(
        run_input(
            "t-ctx",
            "r1",
            user("an old message the server never saw"),
            {"id": "a-old", "role": "assistant", "content": "an old answer"},
            user("the new question"),
            context=[{"description": "current page", "value": "/settings"}],
        )
    )
    post_run(server.url, "coder", body)
    sent = fake_api.requests[0].body["messages"]
    prompt = "<context>\n- current page: /settings\n</context>\n\nthe new question"
    assert sent == [
        {"role": "user", "content": [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}]}
    ]
    system = fake_api.requests[0].body["system"]
    assert system[0]["cache_control"] == {"type": "ephemeral"}
    assert fake_api.requests[0].body["tools"][-1]["cache_control"] == {"type": "ephemeral"}


def test_images_reach_the_model(server, fake_api):
    fake_api.script([text_turn(["A pixel."])])
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "binary", "mimeType": "image/png", "data": "iVBORw0KGgo="},
    ]
    stream = post_run(server.url, "coder", run_input("t-img", "r1", user(content)))
    assert stream.types[-1] == "RUN_FINISHED"
    sent = fake_api.requests[0].body["messages"][0]["content"]
    assert sent == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
    ]


def test_usage_with_cache_tokens_reaches_the_state(server, fake_api):
    fake_api.script([text_turn(["ok"], input_tokens=10, cache_read_input_tokens=900, cache_creation_input_tokens=100)])
    stream = post_run(server.url, "coder", v1(run_input("t-usage", "r1", user("hi"))))
    ops = [op for e in stream.events if e["type"] == "STATE_DELTA" for op in e["delta"]]
    values = {op["path"]: op["value"] for op in ops}
    assert values["/tokenUsage/promptTokens"] == 1010
    assert values["/tokenUsage/cacheReadTokens"] == 900
    assert values["/tokenUsage/cacheWriteTokens"] == 100
    assert values["/tokenUsage/completionTokens"] == 1
