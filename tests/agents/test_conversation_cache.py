"""The conversation is cached (issue #48): each model call marks the end of what it sends for the prompt
cache, so the next call of the run, and the next turn of the thread, reads the history from it."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.test import override_settings

from orchestrator.compaction import SUMMARY_PROMPT
from tests.fakes.anthropic_api import text_turn, thinking, tool_turn, tool_use, turn
from tests.helpers import run_input, squash, user, v1
from tests.sse import post_run
from threads.models import Session

pytestmark = pytest.mark.clients


def _breakpoints(body: dict[str, Any]) -> list[tuple[int, int]]:
    """(message, block) of every block of the request's conversation that carries a breakpoint."""
    return [
        (m, b)
        for m, message in enumerate(body["messages"])
        if not isinstance(message["content"], str)
        for b, block in enumerate(message["content"])
        if "cache_control" in block
    ]


def _all_breakpoints(body: dict[str, Any]) -> int:
    return json.dumps(body).count('"cache_control"')


def _unmarked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the cache reads its prefix: the breakpoints themselves are not part of it."""
    return [
        {**m, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in m["content"]]} for m in messages
    ]


def _last_block(message: dict[str, Any]) -> dict[str, Any]:
    return message["content"][-1]


def test_every_call_after_the_first_reads_what_the_previous_call_sent(server, fake_api):
    fake_api.script([tool_turn("glob", {"pattern": f"*{n}*"}) for n in range(19)] + [text_turn(["Done looking."])])
    with override_settings(AGENT_MAX_ITERATIONS=25):
        stream = post_run(server.url, "coder", v1(run_input("t-cache-20", "r1", user("look around"))))
    server.drain()
    assert squash(stream.types)[-1] == "RUN_FINISHED"
    requests = [request.body for request in fake_api.requests]
    assert len(requests) == 20
    for previous, call in itertools.pairwise(requests):
        sent_before = len(previous["messages"])
        # The conversation the previous call sent is this call's prefix, unchanged but for breakpoints...
        assert _unmarked(call["messages"][:sent_before]) == _unmarked(previous["messages"])
        # ... and its end carries a breakpoint here: the entry the previous call wrote is read.
        assert "cache_control" in _last_block(call["messages"][sent_before - 1])
        # The end of this call's conversation is marked for the next call.
        assert "cache_control" in _last_block(call["messages"][-1])
        assert _breakpoints(call) == [(sent_before - 1, 0), (len(call["messages"]) - 1, 0)]
        # System prompt and tools keep theirs: four in all, the API's limit.
        assert "cache_control" in call["system"][-1] and "cache_control" in call["tools"][-1]
        assert _all_breakpoints(call) == 4
    assert _breakpoints(requests[0]) == [(0, 0)]
    # The stored turns never carry a breakpoint: it is put on the request's copy only.
    session = Session.objects.get(thread__agui_thread_id="t-cache-20")
    assert "cache_control" not in json.dumps(session.turns)


def test_the_next_turn_of_the_thread_reads_the_previous_turns_conversation(server, fake_api):
    fake_api.script([text_turn(["One."]), text_turn(["Two."])])
    post_run(server.url, "coder", v1(run_input("t-cache-turns", "r1", user("one"))))
    server.drain()
    post_run(server.url, "coder", v1(run_input("t-cache-turns", "r2", user("two"))))
    server.drain()
    first, second = (request.body for request in fake_api.requests)
    assert first["messages"][0]["content"] == [
        {"type": "text", "text": first["messages"][0]["content"][0]["text"], "cache_control": {"type": "ephemeral"}}
    ]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert _breakpoints(second) == [(0, 0), (2, 0)]
    assert _unmarked(second["messages"][:1]) == _unmarked(first["messages"])


def test_thinking_blocks_go_back_unmodified_and_unmarked(server, fake_api):
    signed = thinking(["Let me look."], signature="sig-abc")
    fake_api.script([turn(signed, tool_use("glob", {"pattern": "*"})), text_turn(["Found it."])])
    post_run(server.url, "coder", v1(run_input("t-cache-thinking", "r1", user("find it"))))
    server.drain()
    second = fake_api.requests[1].body
    reply = second["messages"][1]
    assert reply["role"] == "assistant"
    assert reply["content"][0] == {"type": "thinking", "thinking": "Let me look.", "signature": "sig-abc"}
    assert all("cache_control" not in block for block in reply["content"])
    assert _breakpoints(second) == [(0, 0), (2, 0)]


def test_a_compactions_summary_request_is_its_own_and_unmarked(server, fake_api):
    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*"}, input_tokens=100),
            tool_turn("file_read", {"path": "README.md"}, input_tokens=900),
            text_turn(["The user listed the workspace and is reading the README."]),  # the summary
            text_turn(["It is a demo project."]),
        ]
    )
    with override_settings(COMPACTION_WINDOW_TOKENS=1000, COMPACTION_AT_SHARE=0.75):
        post_run(server.url, "coder", v1(run_input("t-cache-compact", "r1", user("what is this?"))))
    server.drain()
    summary = fake_api.requests[2].body
    assert summary["system"][0]["text"] == SUMMARY_PROMPT
    assert _breakpoints(summary) == []
    # The call after it starts a prefix of its own (the summary), marked at its end.
    after = fake_api.requests[3].body
    assert (len(after["messages"]) - 1, 0) in _breakpoints(after)


def test_a_sub_agents_conversation_is_a_prefix_of_its_own(server, fake_api):
    fake_api.script(
        [tool_turn("sub_agent", {"task": "CHILD: read the README", "role": "reader"}), text_turn(["It read it."])]
    )
    fake_api.script_for("CHILD", [tool_turn("file_read", {"path": "README.md"}), text_turn(["A demo project."])])
    post_run(server.url, "coder", v1(run_input("t-cache-child", "r1", user("delegate"))))
    server.drain()
    requests = [request.body for request in fake_api.requests]
    child = [body for body in requests if "CHILD" in json.dumps(body["messages"][0])]
    parent = [body for body in requests if body not in child]
    assert len(child) == 2 and len(parent) == 2
    # The child's second call reads what its first sent; the parent's, what the parent's first sent.
    for first, second in (child, parent):
        sent = len(first["messages"])
        assert _unmarked(second["messages"][:sent]) == _unmarked(first["messages"])
        assert _breakpoints(second) == [(sent - 1, 0), (len(second["messages"]) - 1, 0)]
