"""The model API's HTTP layer, whichever transport the SDK is given (issue #50 tried its aiohttp one;
its httpx client now reaches the API directly on orchestrator/providers/http1.py, and through a
proxy on httpcore over asyncio's transports, orchestrator/providers/asyncio_network.py): each delta
is handed over as soon as it is read, the API is reached over TLS, connections are kept alive and
bounded, and a stream that stops mid-way, a malformed reply, a connection that is refused or a
model that stops writing ends as a ModelError the loop can retry. The real SDK against
FakeAnthropic (or a raw socket, for replies it would not send) at the network edge, on asyncio's
own event loop and on uvloop, the server's."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import uvloop

from orchestrator.providers.anthropic import AnthropicProvider
from orchestrator.providers.asyncio_network import AsyncioNetworkBackend
from orchestrator.providers.base import BlockDelta, BlockStart, BlockStop, ModelError, ModelReply, ModelRequest
from orchestrator.providers.http1 import Http1Transport
from tests.certs import self_signed
from tests.fakes.anthropic_api import FakeAnthropic, overloaded, text_turn

MODEL = "claude-sonnet-5-5"
REQUEST = ModelRequest(model=MODEL, system="", messages=[{"role": "user", "content": "hi"}], tools=[], max_tokens=10)


def _provider(base_url: str, **kwargs: object) -> AnthropicProvider:
    # A reply that never comes fails the test in a minute, not the SDK's ten.
    options: dict[str, object] = {"max_retries": 0, "timeout": 60.0, **kwargs}
    return AnthropicProvider(api_key="k", model=MODEL, base_url=base_url, **options)  # type: ignore[arg-type]


async def _events(provider: AnthropicProvider) -> list[object]:
    items: list[object] = []
    try:
        async for item in provider.stream(REQUEST):
            items += item if type(item) is list else [item]
    finally:
        await provider.aclose()
    return items


async def test_a_delta_is_handed_over_while_the_model_is_still_writing_the_next():
    # The stream is held after the first token: a transport that waited to fill its read buffer
    # would hand nothing over until the model went on.
    turn = text_turn(["first ", "second"]).pause(after_events=4, timeout=30)
    with FakeAnthropic([turn]) as fake:
        provider = _provider(fake.base_url)
        try:
            async with contextlib.aclosing(provider.stream(REQUEST)) as stream:
                seen: list[object] = []
                while BlockDelta(0, "first ") not in seen:
                    seen += await asyncio.wait_for(anext(stream), 10)  # type: ignore[operator]
                # The fake marks itself paused just after it writes the delta: wait for the mark, not race it.
                assert await asyncio.to_thread(turn.paused.wait, 10) and not turn.resume.is_set()
                turn.resume.set()
                rest = [item async for item in stream]
        finally:
            await provider.aclose()
    assert seen == [BlockStart(0, "text"), BlockDelta(0, "first ")]
    *batches, reply = rest
    assert [event for batch in batches for event in batch] == [BlockDelta(0, "second"), BlockStop(0)]  # type: ignore[attr-defined]
    assert type(reply) is ModelReply and reply.content[0]["text"] == "first second"


async def test_the_api_is_reached_over_tls_with_the_trusted_certificates(tmp_path, monkeypatch):
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with FakeAnthropic([text_turn(["over ", "TLS"]), text_turn(["again"])], tls=tls) as fake:
        assert fake.base_url.startswith("https://")
        # The system's trust store, as the SDK reads it (SSL_CERT_FILE): the fake's certificate only.
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        provider = _provider(fake.base_url)
        try:
            first = [item async for item in provider.stream(REQUEST)]
            second = [item async for item in provider.stream(REQUEST)]
        finally:
            await provider.aclose()
        assert first[-1].content[0]["text"] == "over TLS"  # type: ignore[union-attr]
        assert second[-1].content[0]["text"] == "again"  # type: ignore[union-attr]
        # One connection kept alive for both calls, as the default transport did.
        assert fake.requests[0].client_address == fake.requests[1].client_address

        monkeypatch.delenv("SSL_CERT_FILE")
        monkeypatch.setenv("SSL_CERT_FILE", str(Path(ssl.get_default_verify_paths().openssl_cafile)))
        untrusting = _provider(fake.base_url)
        with pytest.raises(ModelError) as refused:
            await _events(untrusting)
        assert refused.value.code == "connection" and refused.value.retryable


async def test_a_stream_cut_mid_reply_is_a_retryable_connection_error():
    with FakeAnthropic([text_turn(["one ", "two ", "three"]).drop_connection(after_events=4)]) as fake:
        provider = _provider(fake.base_url)
        with pytest.raises(ModelError) as cut:
            await _events(provider)
    assert cut.value.retryable and cut.value.code in ("connection", "early_end")


async def test_a_refused_connection_is_a_retryable_connection_error():
    with FakeAnthropic() as fake:
        url = fake.base_url  # its port is free again once it stops
    with pytest.raises(ModelError) as refused:
        await _events(_provider(url))
    assert refused.value.code == "connection" and refused.value.retryable


async def test_a_model_that_stops_writing_times_out_as_a_retryable_error():
    turn = text_turn(["slow"]).pause(after_events=3, timeout=30)
    with FakeAnthropic([turn]) as fake:
        provider = _provider(fake.base_url, timeout=0.5)
        try:
            with pytest.raises(ModelError) as stalled:
                await _events(provider)
        finally:
            turn.resume.set()
    assert stalled.value.retryable and stalled.value.code == "connection"


def test_direct_calls_go_through_http1_and_a_proxys_through_a_pool_on_asyncio(monkeypatch):
    # With a proxy in the environment the SDK's client holds a pool per proxy mount (and none for a
    # host NO_PROXY names): each reads on asyncio; the default transport, for direct calls, is ours.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example.test")
    client = _provider("https://api.example.test").client._client
    assert type(client._transport) is Http1Transport
    mounts = list(client._mounts.values())
    assert None in mounts  # NO_PROXY's host: the default transport reaches it
    pools = [transport._pool for transport in mounts if transport is not None]  # type: ignore[attr-defined]
    assert pools and all(type(pool._network_backend) is AsyncioNetworkBackend for pool in pools)


async def test_an_error_reply_is_read_whole_and_its_connection_reused_for_the_retry():
    with FakeAnthropic([overloaded(retry_after=0), text_turn(["after ", "the retry"])]) as fake:
        provider = _provider(fake.base_url, max_retries=1)
        items = await _events(provider)
    assert type(items[-1]) is ModelReply and items[-1].content[0]["text"] == "after the retry"
    assert [r.outcome for r in fake.requests] == ["error_response", "completed"]
    assert fake.requests[0].client_address == fake.requests[1].client_address


async def _raw_server(reply: bytes) -> tuple[asyncio.Server, str]:
    """A server that answers each request with ``reply`` and closes: replies FakeAnthropic would not send."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


_EVENTS = b"".join(
    b"event: %s\ndata: %s\n\n" % (name, data)
    for name, data in [
        (b"message_start", b'{"type":"message_start","message":{"id":"m","model":"m","usage":{"input_tokens":3}}}'),
        (b"content_block_start", b'{"type":"content_block_start","index":0,"content_block":{"type":"text"}}'),
        (
            b"content_block_delta",
            b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"to the end"}}',
        ),
        (b"content_block_stop", b'{"type":"content_block_stop","index":0}'),
        (b"message_delta", b'{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}'),
        (b"message_stop", b'{"type":"message_stop"}'),
    ]
)


async def test_a_reply_that_ends_with_its_connection_is_read_to_that_end():
    # No length and no chunks: the body is all the server sends before it closes.
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    server, url = await _raw_server(head + _EVENTS)
    async with server:
        items = await _events(_provider(url))
    assert type(items[-1]) is ModelReply and items[-1].content[0]["text"] == "to the end"


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nContent-Type: text/event-stream\r\n\r\n" + _EVENTS[:200],
        b"NOT HTTP AT ALL\r\n\r\n",
    ],
    ids=["bad-chunk", "cut-short", "not-http"],
)
async def test_a_malformed_or_truncated_reply_is_a_retryable_connection_error(reply):
    server, url = await _raw_server(reply)
    async with server:
        with pytest.raises(ModelError) as failed:
            await _events(_provider(url))
    assert failed.value.retryable and failed.value.code == "connection"


async def test_the_pool_bounds_its_connections_and_a_request_past_them_waits_for_one():
    # One connection allowed: a second request waits for the first reply's end, then reuses its
    # connection; waiting past the pool timeout is a PoolTimeout.
    turn = text_turn(["held"]).pause(after_events=3, timeout=30)
    with FakeAnthropic([turn, text_turn(["second"])]) as fake:
        transport = Http1Transport(ssl_context=None, limits=httpx2.Limits(max_connections=1))
        async with httpx2.AsyncClient(transport=transport, base_url=fake.base_url) as client:
            body = {"model": MODEL, "max_tokens": 10, "stream": True, "messages": REQUEST.messages}
            async with client.stream("POST", "/v1/messages", json=body) as first:
                with pytest.raises(httpx2.PoolTimeout):
                    await client.post("/v1/messages", json=body, timeout=httpx2.Timeout(5, pool=0.3))
                waiting = asyncio.ensure_future(client.post("/v1/messages", json=body))
                await asyncio.sleep(0.2)
                assert not waiting.done()
                turn.resume.set()
                assert b"held" in await first.aread()
            second = await asyncio.wait_for(waiting, 10)
        assert b"second" in second.content
        assert fake.requests[0].client_address == fake.requests[1].client_address


async def _large_request_and_reply(tls: ssl.SSLContext | None = None) -> None:
    # Past the protocol's buffer both ways: a request the socket cannot take at once (the write
    # waits for it to drain) and a reply read faster than it is taken (reading pauses and resumes).
    chunks = [f"{i:04d}" + "x" * 65_531 for i in range(40)]
    messages = [{"role": "user", "content": "y" * 16_000_000}]
    big = ModelRequest(model=MODEL, system="", messages=messages, tools=[], max_tokens=10)
    with FakeAnthropic([text_turn(chunks)], tls=tls) as fake:
        provider = _provider(fake.base_url)
        try:
            items = []
            async for item in provider.stream(big):
                items += item if type(item) is list else [item]
        finally:
            await provider.aclose()
        assert fake.requests[0].raw_body.count(b"y" * 1000) == 16_000
    reply = items[-1]
    assert type(reply) is ModelReply and reply.content[0]["text"] == "".join(chunks)
    assert "".join(item.text for item in items if type(item) is BlockDelta) == "".join(chunks)


async def test_a_connection_idle_past_the_keepalive_expiry_is_not_reused():
    with FakeAnthropic([text_turn(["one"]), text_turn(["two"]), text_turn(["three"])]) as fake:
        limits = httpx2.Limits(max_connections=10, keepalive_expiry=0.3)
        async with httpx2.AsyncClient(transport=Http1Transport(ssl_context=None, limits=limits)) as client:
            body = {"model": MODEL, "max_tokens": 10, "stream": True, "messages": REQUEST.messages}
            for pause in (0.0, 0.6):
                await asyncio.sleep(pause)
                assert (await client.post(f"{fake.base_url}/v1/messages", json=body)).status_code == 200
            await client.post(f"{fake.base_url}/v1/messages", json=body)
        first, second, third = (request.client_address for request in fake.requests)
    assert second != first and third == second  # a fresh one after the expiry, kept for the next


@contextlib.asynccontextmanager
async def _forwarding_proxy() -> AsyncIterator[tuple[str, list[bytes]]]:
    """An HTTP proxy for http:// targets (the absolute-form request forwarded), and the targets it was asked for."""
    targets: list[bytes] = []

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, rest = head.split(b"\r\n", 1)
        method, target, version = line.split(b" ")
        targets.append(target)
        url = httpx2.URL(target.decode())
        up_reader, up_writer = await asyncio.open_connection(url.host, url.port)
        up_writer.write(b"%s %s %s\r\n%s" % (method, url.raw_path, version, rest))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", targets


async def test_through_a_proxy_a_request_and_reply_larger_than_the_buffers_arrive_whole(monkeypatch):
    # A proxy's pool is httpcore's on asyncio_network's streams: the same sizes through them.
    async with _forwarding_proxy() as (proxy, targets):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        await _large_request_and_reply()
    assert [target.endswith(b"/v1/messages") and target.startswith(b"http://") for target in targets] == [True]


async def test_a_request_and_reply_larger_than_the_buffers_arrive_whole():
    await _large_request_and_reply()


async def test_a_large_reply_over_tls_arrives_whole(tmp_path, monkeypatch):
    await _large_request_and_reply(_trusted_tls(tmp_path, monkeypatch))


def _trusted_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    tmp_path.mkdir(exist_ok=True)
    cert, key = self_signed(tmp_path)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    return tls


def test_on_uvloop_a_large_reply_tls_and_a_stalled_model_behave_as_on_asyncio(tmp_path, monkeypatch):
    # The server runs on uvloop, whose transports the backend then uses.
    async def scenarios() -> None:
        await _large_request_and_reply()
        await _large_request_and_reply(_trusted_tls(tmp_path / "large", monkeypatch))
        await test_a_delta_is_handed_over_while_the_model_is_still_writing_the_next()
        await test_the_api_is_reached_over_tls_with_the_trusted_certificates(tmp_path, monkeypatch)
        await test_a_stream_cut_mid_reply_is_a_retryable_connection_error()
        await test_a_refused_connection_is_a_retryable_connection_error()
        await test_a_model_that_stops_writing_times_out_as_a_retryable_error()
        await test_an_error_reply_is_read_whole_and_its_connection_reused_for_the_retry()
        await test_a_reply_that_ends_with_its_connection_is_read_to_that_end()
        await test_the_pool_bounds_its_connections_and_a_request_past_them_waits_for_one()
        await test_through_a_proxy_a_request_and_reply_larger_than_the_buffers_arrive_whole(monkeypatch)

    async def within_a_limit() -> None:
        async with asyncio.timeout(300):
            await scenarios()

    uvloop.run(within_a_limit())
