"""Proves the loopback fake against the real anthropic SDK (2.x, httpx2 transport)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time

import anthropic
import httpx2
import pytest
import pytest_asyncio

from tests.certs import self_signed

from .anthropic_api import (
    FakeAnthropic,
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

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake():
    with FakeAnthropic() as f:
        yield f


_open_clients: list[anthropic.AsyncAnthropic] = []


def aclient(fake: FakeAnthropic, max_retries: int = 0) -> anthropic.AsyncAnthropic:
    """The real SDK client pointed at the fake (closed by the autouse fixture below)."""
    client = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url, max_retries=max_retries)
    _open_clients.append(client)
    return client


def outcomes(fake: FakeAnthropic) -> list[str | None]:
    """Server-side outcome of every /v1/messages request, once each has finished."""
    reqs = fake.requests
    for r in reqs:
        assert r.done.wait(5)
    return [r.outcome for r in reqs]


@pytest_asyncio.fixture(autouse=True)
async def _close_clients():
    yield
    while _open_clients:
        await _open_clients.pop().close()


async def stream_final(client: anthropic.AsyncAnthropic, **kw):
    """Run client.messages.stream(); return (events, final message)."""
    kw.setdefault("model", "claude-test")
    kw.setdefault("max_tokens", 1024)
    kw.setdefault("messages", MSGS)
    events = []
    async with client.messages.stream(**kw) as stream:
        async for ev in stream:
            events.append(ev)
        final = await stream.get_final_message()
    return events, final


def transport_error(raised: BaseException) -> BaseException:
    """The connection's own failure behind what a dropped stream raised. Earlier anthropic releases
    let a drop after the response began through as httpx2's error itself; 2.17 (installed here in
    December 2026) raises APIConnectionError from it, as for a drop before the response. The
    provider takes both (orchestrator/providers/anthropic.py)."""
    if isinstance(raised, anthropic.APIConnectionError):
        assert raised.__cause__ is not None
        return raised.__cause__
    return raised


async def raw_events(client: anthropic.AsyncAnthropic, **kw):
    kw.setdefault("model", "claude-test")
    kw.setdefault("max_tokens", 1024)
    kw.setdefault("messages", MSGS)
    received = []
    stream = await client.messages.create(stream=True, **kw)
    try:
        async for ev in stream:
            received.append(ev)
    finally:
        await stream.close()
    return received


# ----------------------------------------------------------------------------- happy paths


@pytest.mark.asyncio
async def test_text_usage_and_request_recording(fake):
    fake.add_turn(
        text_turn(
            ["Hel", "lo", " world"],
            input_tokens=120,
            cache_creation_input_tokens=30,
            cache_read_input_tokens=900,
        )
    )
    schema = {"type": "object", "properties": {}}
    tools = [{"name": "get_weather", "description": "w", "input_schema": schema}]
    system = [{"type": "text", "text": "You are Threadline.", "cache_control": {"type": "ephemeral"}}]
    events, final = await stream_final(
        aclient(fake), system=system, tools=tools, thinking={"type": "enabled", "budget_tokens": 512}
    )

    deltas = [e.text for e in events if e.type == "text"]
    assert deltas == ["Hel", "lo", " world"]
    assert final.content[0].type == "text" and final.content[0].text == "Hello world"
    assert final.stop_reason == "end_turn"
    assert final.model == "claude-test"  # echoed from the request
    assert final.id == "msg_fake_000001"
    u = final.usage
    assert (u.input_tokens, u.cache_creation_input_tokens, u.cache_read_input_tokens, u.output_tokens) == (
        120,
        30,
        900,
        3,
    )

    (req,) = fake.requests
    assert req.stream is True
    assert req.body["system"] == system
    assert req.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert req.body["tools"] == tools
    assert req.body["thinking"] == {"type": "enabled", "budget_tokens": 512}
    assert req.body["messages"] == MSGS
    assert req.headers["anthropic-version"]
    assert outcomes(fake) == ["completed"]
    fake.assert_all_consumed()


@pytest.mark.asyncio
async def test_thinking_signature_and_redacted_thinking(fake):
    fake.add_turn(
        turn(
            thinking(["Let me ", "think."], signature="sig-123"),
            redacted_thinking("opaque=="),
            text("Done."),
        )
    )
    events, final = await stream_final(aclient(fake))
    assert [e.thinking for e in events if e.type == "thinking"] == ["Let me ", "think."]
    assert [e.signature for e in events if e.type == "signature"] == ["sig-123"]
    assert [b.type for b in final.content] == ["thinking", "redacted_thinking", "text"]
    assert final.content[0].thinking == "Let me think." and final.content[0].signature == "sig-123"
    assert final.content[1].data == "opaque=="
    assert final.content[2].text == "Done."


@pytest.mark.asyncio
async def test_tool_use_input_is_reconstructed(fake):
    args = {"city": "Paris", "days": 3, "units": ["C", "F"], "nested": {"ok": True}}
    fake.script(
        [
            turn(
                text("Checking."),
                tool_use("get_weather", args, id="toolu_1", pieces=5),
                tool_use("ping", {}),
            ),
        ]
    )
    events, final = await stream_final(aclient(fake))
    partials = [e.partial_json for e in events if e.type == "input_json"]
    assert partials[0] == ""  # the API opens with an empty fragment
    assert len(partials) >= 5
    assert final.stop_reason == "tool_use"
    text_block, tool, empty_tool = final.content
    assert text_block.text == "Checking."
    assert (tool.type, tool.id, tool.name, tool.input) == ("tool_use", "toolu_1", "get_weather", args)
    assert (empty_tool.name, empty_tool.input) == ("ping", {})
    assert empty_tool.id.startswith("toolu_")


@pytest.mark.asyncio
async def test_raw_create_stream_events(fake):
    fake.add_turn(tool_turn("search", {"q": "x"}, preamble=["a", "b"], cache_read_input_tokens=5))
    evs = await raw_events(aclient(fake))
    types = [e.type for e in evs]
    # pings are swallowed by the SDK
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert "ping" not in types
    assert evs[0].message.usage.cache_read_input_tokens == 5
    assert evs[-2].delta.stop_reason == "tool_use"
    assert [e.content_block.type for e in evs if e.type == "content_block_start"] == ["text", "tool_use"]


def test_sync_client_and_non_stream_fallback(fake):
    fake.script(
        [
            text_turn(["sync ", "ok"]),
            turn(text("summary"), tool_use("t", {"a": 1}), stop_reason="max_tokens"),
        ]
    )
    with anthropic.Anthropic(api_key="test", base_url=fake.base_url, max_retries=0) as client:
        with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
            assert stream.get_final_text() == "sync ok"
        msg = client.messages.create(model="m", max_tokens=10, messages=MSGS)  # no stream => JSON body
    assert fake.requests[1].stream is False
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[0].text == "summary" and msg.content[1].input == {"a": 1}
    assert msg.stop_reason == "max_tokens"
    assert msg.usage.input_tokens == 25


# ----------------------------------------------------------------------------- failure modes


@pytest.mark.asyncio
async def test_in_stream_error_raises_api_status_error_with_status_200(fake):
    fake.add_turn(text_turn(["partial ", "answer"]).error_mid_stream(after_blocks=1))
    received = []
    client = aclient(fake, max_retries=3)
    with pytest.raises(anthropic.APIStatusError) as info:
        async with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
            async for ev in stream:
                if ev.type == "text":
                    received.append(ev.text)
    err = info.value
    # the HTTP status was 200, so no status-specific subclass (not OverloadedError) ...
    assert type(err) is anthropic.APIStatusError
    assert err.status_code == 200
    assert err.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert received == ["partial ", "answer"]
    # ... and the SDK does not retry a stream that already started
    assert outcomes(fake) == ["stream_error"]


@pytest.mark.asyncio
async def test_in_stream_error_raw_create(fake):
    fake.add_turn(text_turn("x").error_mid_stream(after_events=2, error_type="api_error", message="boom"))
    with pytest.raises(anthropic.APIStatusError) as info:
        await raw_events(aclient(fake))
    assert type(info.value) is anthropic.APIStatusError and info.value.status_code == 200
    assert info.value.body["error"] == {"type": "api_error", "message": "boom"}


@pytest.mark.asyncio
async def test_early_end_is_silent_and_stop_reason_is_none(fake):
    fake.script(
        [
            turn(text(["one ", "two"]), tool_use("t", {"k": "v"})).end_early(after_blocks=1),
            turn(text(["one ", "two"])).end_early(after_events=4),  # start, ping, block_start, 1 delta
            text_turn("after"),
        ]
    )
    client = aclient(fake)
    _, final = await stream_final(client)
    assert final.stop_reason is None
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == "one two"
    assert final.usage.output_tokens == 1  # only message_start's count

    evs = await raw_events(client)
    assert [e.type for e in evs] == ["message_start", "content_block_start", "content_block_delta"]

    # the connection was ended cleanly, so it is reused (keep-alive) for the next call
    _, final = await stream_final(client)
    assert final.content[0].text == "after"
    assert outcomes(fake) == ["ended_early", "ended_early", "completed"]
    assert len({r.client_address for r in fake.requests}) == 1


@pytest.mark.asyncio
async def test_early_end_before_message_start(fake):
    fake.add_turn(text_turn("x").end_early(after_events=0))
    # no message_start => the helper has no snapshot; get_final_message() trips an assert
    with pytest.raises(AssertionError):
        await stream_final(aclient(fake))


@pytest.mark.asyncio
async def test_dropped_connection_mid_stream_raises_remote_protocol_error(fake):
    fake.add_turn(text_turn(["a", "b"]).drop_connection(after_blocks=1))
    client = aclient(fake, max_retries=3)
    received = []
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as info:
        async with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
            async for ev in stream:
                if ev.type == "text":
                    received.append(ev.text)
    dropped = transport_error(info.value)
    assert isinstance(dropped, httpx2.RemoteProtocolError)
    assert "incomplete chunked read" in str(dropped)
    assert received == ["a", "b"]
    assert outcomes(fake) == ["dropped"]  # not retried


@pytest.mark.asyncio
async def test_dropped_connection_raw_and_rst(fake):
    fake.script(
        [
            text_turn(["a", "b"]).drop_connection(after_events=3),
            text_turn(["a", "b"]).drop_connection(after_events=3, reset=True),
        ]
    )
    client = aclient(fake)
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as info:
        await raw_events(client)
    assert isinstance(transport_error(info.value), httpx2.RemoteProtocolError)
    with pytest.raises((httpx2.ReadError, anthropic.APIConnectionError)) as info:  # TCP RST mid-body
        await raw_events(client)
    assert isinstance(transport_error(info.value), httpx2.ReadError)


@pytest.mark.asyncio
async def test_drop_before_response_is_connection_error_and_retried(fake):
    fake.add_turn(dropped_connection())
    with pytest.raises(anthropic.APIConnectionError) as info:
        await stream_final(aclient(fake))
    assert isinstance(info.value.__cause__, httpx2.RemoteProtocolError)

    fake.script([dropped_connection(), text_turn("recovered")])
    t0 = time.monotonic()
    _, final = await stream_final(aclient(fake, max_retries=2))
    assert final.content[0].text == "recovered"
    assert len(fake.requests) == 3
    assert fake.requests[2].headers["x-stainless-retry-count"] == "1"
    assert time.monotonic() - t0 < 5


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("error", "exc_class", "status"),
    [
        (rate_limited(retry_after=1), anthropic.RateLimitError, 429),
        (api_error(), anthropic.InternalServerError, 500),
        (overloaded(), anthropic.OverloadedError, 529),
        (http_error(400, "invalid_request_error", "bad"), anthropic.BadRequestError, 400),
    ],
)
async def test_http_errors_map_to_sdk_exceptions(fake, error, exc_class, status):
    fake.add_turn(error)
    with pytest.raises(exc_class) as info:
        await stream_final(aclient(fake))
    assert info.value.status_code == status
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == error.error_type
    assert info.value.request_id and info.value.request_id.startswith("req_fake_")
    if status == 429:
        assert info.value.response.headers["retry-after"] == "1"
    assert len(fake.requests) == 1


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [429, 500, 529])
async def test_http_errors_are_retried(fake, status):
    kind = {429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}[status]
    fake.script([http_error(status, kind, "try again", retry_after_ms=1), text_turn("ok")])
    _, final = await stream_final(aclient(fake, max_retries=2))
    assert final.content[0].text == "ok"
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1"]


@pytest.mark.asyncio
async def test_retry_after_is_honoured_and_400_not_retried(fake):
    fake.script([rate_limited(retry_after_ms=300), text_turn("ok")])
    t0 = time.monotonic()
    await stream_final(aclient(fake, max_retries=1))
    assert time.monotonic() - t0 >= 0.29

    fake.reset()
    fake.script([http_error(400, "invalid_request_error", "nope"), text_turn("unused")])
    with pytest.raises(anthropic.BadRequestError):
        await stream_final(aclient(fake, max_retries=2))
    assert len(fake.requests) == 1 and fake.pending == 1


@pytest.mark.asyncio
async def test_script_exhausted_fails_loudly(fake):
    with pytest.raises(anthropic.InternalServerError, match="script ran out") as info:
        await stream_final(aclient(fake, max_retries=2))
    assert info.value.status_code == 500
    assert len(fake.requests) == 1  # x-should-retry: false
    assert fake.errors and "script ran out" in fake.errors[0]
    with pytest.raises(AssertionError):
        fake.assert_all_consumed()


# ----------------------------------------------------------------------------- pacing, pause, load


@pytest.mark.asyncio
async def test_paced_stream_client_disconnect_is_detected(fake):
    fake.add_turn(text_turn(split_tokens("one two three four five six seven eight nine ten")).paced(0.05))
    client = aclient(fake)
    got = []
    t0 = time.monotonic()
    async with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
        async for ev in stream:
            if ev.type == "text":
                got.append(ev.text)
                if len(got) == 2:
                    break
    assert got == ["one", " two"]
    req = fake.requests[0]
    assert await asyncio.to_thread(req.client_disconnected.wait, 3)
    assert req.outcome == "client_disconnected"
    assert time.monotonic() - t0 < 3


@pytest.mark.asyncio
async def test_pause_holds_stream_until_resumed(fake):
    t = turn(text("first"), text("second")).pause(after_blocks=1)
    fake.add_turn(t)
    client = aclient(fake)
    seen = []

    async def consume():
        async with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
            async for ev in stream:
                if ev.type == "text":
                    seen.append(ev.text)
            return await stream.get_final_message()

    task = asyncio.create_task(consume())
    assert await asyncio.to_thread(t.paused.wait, 5)
    await asyncio.sleep(0.1)
    assert seen == ["first"] and not task.done()
    t.resume.set()
    final = await asyncio.wait_for(task, 5)
    assert [b.text for b in final.content] == ["first", "second"]


@pytest.mark.asyncio
async def test_pause_then_cancel(fake):
    t = text_turn(["a", "b"]).pause(after_events=3)  # after content_block_start
    fake.add_turn(t)
    client = aclient(fake)

    async def consume():
        async with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
            await stream.until_done()

    task = asyncio.create_task(consume())
    assert await asyncio.to_thread(t.paused.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    req = fake.requests[0]
    assert await asyncio.to_thread(req.client_disconnected.wait, 3)


@pytest.mark.asyncio
async def test_benchmark_turn_streams_every_chunk(fake):
    n = 20_000
    bt = benchmark_turn(n)
    fake.add_turn(bt, times=2)
    client = aclient(fake)
    evs = await raw_events(client)
    assert sum(1 for e in evs if e.type == "content_block_delta") == n
    _, final = await stream_final(client)
    assert final.content[0].text == "tok " * n
    assert final.usage.output_tokens == n


@pytest.mark.asyncio
async def test_many_concurrent_streams_and_keepalive(fake):
    n = 60
    fake.add_turn(text_turn(split_tokens("alpha beta gamma")).paced(0.01), times=n)
    client = aclient(fake)

    async def one():
        async with client.messages.stream(model="m", max_tokens=10, messages=MSGS) as stream:
            return await stream.get_final_text()

    results = await asyncio.gather(*(one() for _ in range(n)))
    assert results == ["alpha beta gamma"] * n
    assert outcomes(fake) == ["completed"] * n
    assert fake.errors == []

    # sequential calls on one client reuse a single keep-alive connection
    fake.reset()
    fake.add_turn(text_turn("x"), times=5)
    fresh = aclient(fake)
    for _ in range(5):
        await stream_final(fresh)
    assert len({r.client_address for r in fake.requests}) == 1


def test_a_tls_client_that_connects_and_goes_quiet_does_not_hold_stop(tmp_path):
    # A client on an event loop that stop() then holds (a test's `with FakeAnthropic(...)` ending)
    # may not have sent or closed anything yet: its handshake must not keep stop() waiting.
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    fake = FakeAnthropic(tls=tls).start()
    with socket.create_connection(("127.0.0.1", fake.port)):
        time.sleep(0.2)  # accepted, its handshake awaited
        stopping = threading.Thread(target=fake.stop, daemon=True)
        stopping.start()
        stopping.join(10)
        assert not stopping.is_alive()
