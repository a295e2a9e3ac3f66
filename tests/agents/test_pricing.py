"""Model call costs for the state document's tokenUsage.cost."""

from __future__ import annotations

import pytest

from orchestrator.events import Usage
from orchestrator.pricing import cost_of, price_of


@pytest.mark.parametrize(
    ("model", "per_million_input"),
    [
        ("claude-opus-4-5-20251101", 5),
        ("claude-opus-4-1-20250805", 15),
        ("claude-sonnet-4-5", 3),
        ("claude-sonnet-5-5", 3),  # a newer release is priced by its family
        ("claude-haiku-4-5", 1),
        ("claude-3-5-haiku-latest", 0.8),
    ],
)
def test_models_are_priced_by_prefix_then_family(model, per_million_input):
    price = price_of(model)
    assert price is not None and price.input == per_million_input


def test_a_call_costs_its_tokens_at_their_own_rates():
    usage = Usage(
        model="claude-sonnet-4-5",
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=2_000_000,
        cache_write_tokens=10_000,
    )
    assert cost_of(usage) == pytest.approx(3 + 1.5 + 0.6 + 0.0375)


def test_unpriced_models_cost_nothing():
    assert price_of("threadline-demo") is None
    assert cost_of(Usage(model="claude-fake-model", input_tokens=10**6)) == 0.0


def test_the_state_document_counts_the_cost_of_a_run(server, fake_api):
    from tests.fakes.anthropic_api import text_turn
    from tests.helpers import run_input, user, v1
    from tests.sse import post_run
    from threads.models import Thread

    fake_api.script(
        [
            text_turn(
                ["Hello."],
                model="claude-sonnet-4-5",
                input_tokens=2000,
                output_tokens=500,
                cache_read_input_tokens=10_000,
            )
        ]
    )
    stream = post_run(server.url, "coder", v1(run_input("t-cost", "r1", user("hi"))))
    server.drain()
    expected = (2000 * 3 + 500 * 15 + 10_000 * 0.3) / 1_000_000
    delta = next(e for e in stream.events if e["type"] == "STATE_DELTA" and "/tokenUsage/cost" in str(e["delta"]))
    assert {"op": "replace", "path": "/tokenUsage/cost", "value": expected} in delta["delta"]
    assert Thread.objects.get(agui_thread_id="t-cost").state["tokenUsage"]["cost"] == expected
