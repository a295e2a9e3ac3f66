"""/metrics: approvals by all five decisions, compactions with the
turns they dropped and their duration."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.sse import post_run

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(server: Any) -> Samples:
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer test-token"})
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


@pytest.mark.clients
@pytest.mark.parametrize(
    ("payload", "decision"),
    [
        ({"approved": True}, "yes"),
        ({"approved": True, "always": True}, "yes_always"),
        ({"approved": False}, "no"),
        ({"approved": False, "reason": "not on a Friday"}, "no_with_reason"),
    ],
)
def test_each_answer_is_counted_by_its_decision(server, fake_api, workspace, payload, decision):
    fake_api.script([tool_turn("file_write", {"path": "n.txt", "content": "x\n"}), text_turn(["ok"])])
    first = {"threadId": f"t-m-{decision}", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "w"}]}
    second = {"runId": "r1", "answerAll": {"status": "resolved", "payload": payload}}
    before = _samples(server)
    results = run_client("1", f"{server.url}/agui/coder", "test-token", [first, second])
    server.drain()
    assert all(result["error"] is None for result in results)
    after = _samples(server)
    assert _delta(before, after, "threadline_approvals_total", tool="file_write", decision=decision) == 1
    assert _delta(before, after, "threadline_approval_wait_seconds_count") == 1


def test_nobody_answering_is_counted_as_a_timeout(server, fake_api, workspace):
    fake_api.script([tool_turn("file_write", {"path": "n.txt", "content": "x\n"}), text_turn(["ok"])])
    before = _samples(server)
    with override_settings(APPROVAL_TIMEOUT_SECONDS=0.3):
        post_run(server.url, "coder", v1(run_input("t-m-timeout", "r1", user("w"))))
    # No process waits on the deadline: the sweep finds it passed and goes on with the run.
    eventually(lambda: len(fake_api.requests) == 2, what="the expired approval going on")
    server.drain()
    after = _samples(server)
    assert _delta(before, after, "threadline_approvals_total", tool="file_write", decision="timeout") == 1


def test_a_compaction_is_counted_with_the_turns_it_dropped_and_its_duration(server, fake_api):
    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*"}, input_tokens=100),
            tool_turn("file_read", {"path": "README.md"}, input_tokens=900),
            text_turn(["The user listed the workspace and is reading the README."]),  # the summary
            text_turn(["It is a demo project."]),
        ]
    )
    before = _samples(server)
    with override_settings(COMPACTION_WINDOW_TOKENS=1000, COMPACTION_AT_SHARE=0.75):
        post_run(server.url, "coder", v1(run_input("t-m-compact", "r1", user("what is this?"))))
        server.drain()
    after = _samples(server)
    assert _delta(before, after, "threadline_compactions_total") == 1
    # user, assistant (glob), user (its result) were summarised; the last call and its result kept.
    assert _delta(before, after, "threadline_compacted_turns_total") == 3
    assert _delta(before, after, "threadline_compaction_duration_seconds_count") == 1
