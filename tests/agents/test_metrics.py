"""/metrics: tool durations and outcomes, model calls and tokens, compactions, runs by outcome."""

from __future__ import annotations

import httpx

from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.metrics import delta, samples
from tests.sse import post_run


def test_a_run_is_counted(server, fake_api):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "README.md"}, input_tokens=10, cache_read_input_tokens=90),
            tool_turn("file_read", {"path": "missing.txt"}),
            text_turn(["ok"]),
        ]
    )
    before = samples(server)
    post_run(server.url, "coder", v1(run_input("t-metrics", "r1", user("read"))))
    server.drain()
    after = samples(server)
    model = "claude-sonnet-5-5"
    assert delta(before, after, "threadline_tool_duration_seconds_count", tool="file_read", outcome="ok") == 1
    assert delta(before, after, "threadline_tool_duration_seconds_count", tool="file_read", outcome="error") == 1
    # Usage is attributed to the agent the run served.
    assert delta(before, after, "threadline_model_calls_total", agent="coder", model=model, purpose="turn") == 3
    tokens = {"agent": "coder", "model": model, "purpose": "turn"}
    assert delta(before, after, "threadline_model_tokens_total", kind="cache_read", **tokens) == 90
    assert delta(before, after, "threadline_runs_total", outcome="success") == 1


def test_metrics_need_the_token(server):
    assert httpx.get(f"{server.url}/metrics").status_code == 401
