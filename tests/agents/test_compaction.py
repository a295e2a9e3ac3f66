"""Compaction: with a small window, older turns are summarised before the next call; the transcript keeps all."""

from __future__ import annotations

import httpx
import pytest
from django.test import override_settings

from orchestrator.compaction import SUMMARY_PROMPT
from orchestrator.events import Usage
from orchestrator.pricing import cost_of
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, squash, user, v1
from tests.sse import post_run
from threads.models import Message, Session, Thread


def _pairs_are_intact(messages: list[dict]) -> bool:
    for index, message in enumerate(messages):
        if message["role"] != "user" or isinstance(message["content"], str):
            continue
        results = [b["tool_use_id"] for b in message["content"] if b.get("type") == "tool_result"]
        if not results:
            continue
        previous = messages[index - 1] if index else None
        if previous is None or previous["role"] != "assistant":
            return False
        calls = [b["id"] for b in previous["content"] if b.get("type") == "tool_use"]
        if sorted(calls) != sorted(results):
            return False
    return True


def test_older_turns_are_summarised_before_the_window_fills(server, fake_api):
    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*"}, input_tokens=100),
            tool_turn("file_read", {"path": "README.md"}, input_tokens=900),
            text_turn(["The user listed the workspace and is reading the README."]),  # the summary
            text_turn(["It is a demo project."]),
        ]
    )
    with override_settings(COMPACTION_WINDOW_TOKENS=1000, COMPACTION_AT_SHARE=0.75):
        stream = post_run(server.url, "coder", v1(run_input("t-compact", "r1", user("what is this?"))))
    server.drain()
    steps = [e["stepName"] for e in stream.events if e["type"] == "STEP_STARTED"]
    assert steps == ["planning", "executing", "planning", "executing", "compacting", "planning"]
    assert squash(stream.types)[-1] == "RUN_FINISHED"

    summary_request = fake_api.requests[2].body
    assert summary_request["system"][0]["text"] == SUMMARY_PROMPT
    assert "tools" not in summary_request
    assert "glob" in summary_request["messages"][0]["content"]

    before, after = fake_api.requests[1].body["messages"], fake_api.requests[3].body["messages"]
    assert len(after) < len(before) + 2
    assert after[0]["content"][0]["text"].startswith("<conversation-summary>\nThe user listed the workspace")
    assert [m["role"] for m in after] == ["user", "assistant", "user"]
    assert _pairs_are_intact(after)
    # Only the model's view was compacted: the session holds it, the transcript keeps everything.
    turns = Session.objects.get(thread__agui_thread_id="t-compact").turns
    assert turns[0]["content"][0]["text"].startswith("<conversation-summary>")
    roles = list(Message.objects.filter(thread__agui_thread_id="t-compact").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


def test_no_compaction_while_the_prompt_is_small(server, fake_api):
    fake_api.script([tool_turn("glob", {"pattern": "*"}, input_tokens=100), text_turn(["ok"])])
    with override_settings(COMPACTION_WINDOW_TOKENS=100_000):
        stream = post_run(server.url, "coder", v1(run_input("t-small", "r1", user("hi"))))
    assert "compacting" not in [e.get("stepName") for e in stream.events]
    assert len(fake_api.requests) == 2


def test_a_summary_call_counts_on_the_threads_spend_and_in_metrics(server, fake_api):
    """What a person pays for: the summary is a model call like the others (issue #42)."""
    from prometheus_client.parser import text_string_to_metric_families

    def compaction_tokens() -> float:
        response = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer test-token"})
        return sum(
            sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if sample.name == "threadline_model_tokens_total" and sample.labels.get("purpose") == "compaction"
        )

    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*"}, input_tokens=100, output_tokens=10),
            tool_turn("file_read", {"path": "README.md"}, input_tokens=900, output_tokens=10),
            text_turn(["The user is reading the README."], input_tokens=700, output_tokens=50),  # the summary
            text_turn(["It is a demo project."], input_tokens=200, output_tokens=5),
        ]
    )
    before = compaction_tokens()
    with override_settings(COMPACTION_WINDOW_TOKENS=1000, COMPACTION_AT_SHARE=0.75):
        stream = post_run(server.url, "coder", v1(run_input("t-compact-cost", "r1", user("what is this?"))))
    server.drain()
    assert "compacting" in [e["stepName"] for e in stream.events if e["type"] == "STEP_STARTED"]
    usage = Thread.objects.get(agui_thread_id="t-compact-cost").state["tokenUsage"]
    assert usage["totalPromptTokens"] == 100 + 900 + 700 + 200
    assert usage["totalCompletionTokens"] == 10 + 10 + 50 + 5
    assert usage["cost"] == pytest.approx(cost_of(Usage("claude-sonnet-5-5", input_tokens=1900, output_tokens=75)))
    assert usage["promptTokens"] == 200  # the live context is the last turn's prompt, not the summary's
    session = Session.objects.get(thread__agui_thread_id="t-compact-cost")
    assert (session.input_tokens, session.output_tokens) == (1900, 75)
    assert compaction_tokens() - before == 700 + 50
