"""Every failure of the model API, through the AG-UI endpoint, with the outcome a user would want:
retried where that is safe and unseen, else a clean RUN_ERROR that says what happened."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.fakes.anthropic_api import api_error, dropped_connection, http_error, overloaded, rate_limited, text_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run


def _answer(stream) -> str:
    return "".join(e["delta"] for e in stream.events if e["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.mark.parametrize(
    "failure",
    [rate_limited(retry_after_ms=1), overloaded(retry_after_ms=1), api_error(retry_after_ms=1), dropped_connection()],
    ids=["429", "529 overloaded", "500", "connection dropped before a response"],
)
def test_a_failed_request_is_retried_and_the_user_sees_only_the_answer(server, fake_api, failure):
    fake_api.script([failure, text_turn(["Fine."])])
    with override_settings(ANTHROPIC_MAX_RETRIES=2):
        stream = post_run(server.url, "coder", v1(run_input("t-retry-http", "r1", user("hi"))))
    assert stream.types[-1] == "RUN_FINISHED"
    assert _answer(stream) == "Fine."
    assert len(fake_api.requests) == 2


def test_when_retries_run_out_the_run_errors_with_the_reason(server, fake_api):
    fake_api.script([overloaded(retry_after_ms=1)] * 3 + [overloaded(retry_after_ms=1)] * 3)
    with override_settings(ANTHROPIC_MAX_RETRIES=1, MODEL_STREAM_RETRIES=1):
        stream = post_run(server.url, "coder", v1(run_input("t-exhausted", "r1", user("hi"))))
    assert stream.types == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED", "STEP_FINISHED", "RUN_ERROR"]
    assert stream.events[-1]["code"] == "overloaded_error"
    assert "529" in stream.events[-1]["message"]


def test_a_bad_request_is_not_retried(server, fake_api):
    fake_api.script([http_error(400, "invalid_request_error", "prompt is too long")])
    with override_settings(ANTHROPIC_MAX_RETRIES=2):
        stream = post_run(server.url, "coder", v1(run_input("t-400", "r1", user("hi"))))
    assert stream.events[-1]["type"] == "RUN_ERROR"
    assert stream.events[-1]["code"] == "invalid_request_error"
    assert "prompt is too long" in stream.events[-1]["message"]
    assert len(fake_api.requests) == 1
