"""The model API's HTTP layer, whichever transport the SDK is given (issue #50 tried its aiohttp one;
its httpx client now reaches the network on asyncio's transports, orchestrator/providers/asyncio_network.py):
each delta is handed over as soon as it is read, the API is reached over TLS, and a stream that
stops mid-way, a connection that is refused or a model that stops writing ends as a ModelError the
loop can retry. The real SDK against FakeAnthropic at the network edge, on asyncio's own event loop
and on uvloop, the server's."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from pathlib import Path

import pytest
import uvloop

from orchestrator.providers.anthropic import AnthropicProvider
from orchestrator.providers.asyncio_network import AsyncioNetworkBackend
from orchestrator.providers.base import BlockDelta, BlockStart, BlockStop, ModelError, ModelReply, ModelRequest
from tests.certs import self_signed
from tests.fakes.anthropic_api import FakeAnthropic, text_turn

MODEL = "claude-sonnet-5-5"
REQUEST = ModelRequest(model=MODEL, system="", messages=[{"role": "user", "content": "hi"}], tools=[], max_tokens=10)


def _provider(base_url: str, **kwargs: object) -> AnthropicProvider:
    return AnthropicProvider(api_key="k", model=MODEL, base_url=base_url, max_retries=0, **kwargs)  # type: ignore[arg-type]


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


def test_every_connection_pool_of_the_sdk_client_is_on_asyncio_network(monkeypatch):
    # With a proxy in the environment the SDK's client holds a pool per mount: each one reads on asyncio.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    client = _provider("https://api.example.test").client._client
    pools = [transport._pool for transport in (client._transport, *client._mounts.values())]  # type: ignore[union-attr]
    assert len(pools) >= 2
    assert all(type(pool._network_backend) is AsyncioNetworkBackend for pool in pools)


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

    uvloop.run(scenarios())
