"""/metrics: tool durations and outcomes, model calls and tokens, compactions, runs by outcome."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run


def _samples(server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer test-token"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _delta(before, after, name, **labels):
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_a_run_is_counted(server, fake_api):
    fake_api.script(
        [
            tool_turn("file_read", {"path": "README.md"}, input_tokens=10, cache_read_input_tokens=90),
            tool_turn("file_read", {"path": "missing.txt"}),
            text_turn(["ok"]),
        ]
    )
    before = _samples(server)
    post_run(server.url, "coder", v1(run_input("t-metrics", "r1", user("read"))))
    server.drain()
    after = _samples(server)
    model = "claude-sonnet-5-5"
    assert _delta(before, after, "threadline_tool_duration_seconds_count", tool="file_read", outcome="ok") == 1
    assert _delta(before, after, "threadline_tool_duration_seconds_count", tool="file_read", outcome="error") == 1
    # Usage is attributed to the agent the run served.
    assert _delta(before, after, "threadline_model_calls_total", agent="coder", model=model, purpose="turn") == 3
    tokens = {"agent": "coder", "model": model, "purpose": "turn"}
    assert _delta(before, after, "threadline_model_tokens_total", kind="cache_read", **tokens) == 90
    assert _delta(before, after, "threadline_runs_total", outcome="success") == 1


def test_metrics_need_the_token(server):
    assert httpx.get(f"{server.url}/metrics").status_code == 401
