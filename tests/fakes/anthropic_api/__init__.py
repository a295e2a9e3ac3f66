"""A loopback fake of the Anthropic Messages API for tests and benchmarks.

It speaks the real wire format (HTTP/1.1 keep-alive, chunked ``text/event-stream``
with ``event:``/``data:`` lines) so the *real* ``anthropic`` SDK can be pointed
at it through ``base_url``::

    from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn, http_error

    with FakeAnthropic() as fake:
        fake.script([
            http_error(529, "overloaded_error", "Overloaded", retry_after_ms=1),
            tool_turn("get_weather", {"city": "Paris"}),
            text_turn(["It is ", "sunny."]),
        ])
        client = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=2)
        ...
        assert fake.requests[1].body["messages"][-1]["content"][0]["type"] == "tool_result"

Every POST /v1/messages consumes the next scripted turn (FIFO).  When the script
is exhausted the fake answers 500 ``api_error`` with ``x-should-retry: false``
and a message saying so, so a test fails loudly instead of hanging.

Only the standard library is used.  The server runs in a background thread, so it
works the same from sync and async tests.
"""

from __future__ import annotations

from tests.fakes.anthropic_api.script import (
    DropTurn,
    ErrorTurn,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Turn,
    api_error,
    benchmark_turn,
    dropped_connection,
    http_error,
    overloaded,
    rate_limited,
    redacted_thinking,
    split_tokens,
    text,
    text_turn,
    thinking,
    tool_turn,
    tool_use,
    turn,
)
from tests.fakes.anthropic_api.server import FakeAnthropic, RecordedRequest

__all__ = [
    "DropTurn",
    "ErrorTurn",
    "FakeAnthropic",
    "RecordedRequest",
    "RedactedThinkingBlock",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Turn",
    "api_error",
    "benchmark_turn",
    "dropped_connection",
    "http_error",
    "overloaded",
    "rate_limited",
    "redacted_thinking",
    "split_tokens",
    "text",
    "text_turn",
    "thinking",
    "tool_turn",
    "tool_use",
    "turn",
]
