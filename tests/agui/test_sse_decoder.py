"""orchestrator/providers/sse.py decodes the model API's event stream as the SDK's own decoder does,
however the bytes are split into reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from anthropic._streaming import SSEDecoder

from orchestrator.providers.sse import SSESplitter

STREAM = (
    b'event: message_start\ndata: {"type":"message_start"}\n\n'
    b": a comment\n\n"
    b'event: content_block_delta\ndata: {"delta":"h\\u00e9"}\n\n'
    b"event: ping\r\ndata: {}\r\n\r\n"
    b"event:custom\rdata:first\rdata: second\r\r"
    b'data: {"no":"event"}\n\n'
    b'event: content_block_delta\ndata: {"delta":"\xc3\xa9t\xc3\xa9"}\n\n'
    b"id: 7\nevent: message_stop\ndata: {}"
)


async def _reads(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    last = 0
    for cut in [*cuts, len(data)]:
        yield data[last:cut]
        last = cut


async def _ours(data: bytes, cuts: list[int]) -> list[tuple[bytes, bytes]]:
    splitter = SSESplitter()
    return [event async for read in _reads(data, cuts) for event in splitter.feed(read)]


async def _sdk(data: bytes) -> list[tuple[bytes, bytes]]:
    """The SDK's events, as ours name them: the name's bytes, undecoded."""
    return [((sse.event or "").encode(), sse.data.encode()) async for sse in SSEDecoder().aiter_bytes(_reads(data, []))]


def test_it_reads_what_the_sdk_reads_from_one_read():
    expected = asyncio.run(_sdk(STREAM))
    assert [name for name, _ in expected] == [
        b"message_start",
        b"content_block_delta",
        b"ping",
        b"custom",
        b"",
        b"content_block_delta",
    ]  # the last event has no blank line after it: cut off, so dropped
    assert asyncio.run(_ours(STREAM, [])) == expected


def test_it_reads_the_same_events_wherever_a_read_ends():
    expected = asyncio.run(_sdk(STREAM))
    for cut in range(1, len(STREAM)):
        assert asyncio.run(_ours(STREAM, [cut])) == expected, f"split at byte {cut}"
    assert asyncio.run(_ours(STREAM, list(range(1, len(STREAM))))) == expected


# Reads made only of usual events take the regex path; these look usual but are not all alike.
USUAL = (
    b'event: content_block_delta\ndata: {"text":"event: ping\\ndata: {}\\n\\n"}\n\n'
    b"event: \ndata: \n\n"
    b"event: some_new_kind\ndata: {}\n\n"
    b"event: message_stop\ndata: data: data\n\n"
)


def test_reads_of_usual_events_only_give_what_the_sdk_gives():
    expected = asyncio.run(_sdk(USUAL))
    assert [name for name, _ in expected] == [b"content_block_delta", b"", b"some_new_kind", b"message_stop"]
    assert asyncio.run(_ours(USUAL, [])) == expected
    for cut in range(1, len(USUAL)):
        assert asyncio.run(_ours(USUAL, [cut])) == expected, f"split at byte {cut}"


def test_a_usual_read_then_an_unusual_one_loses_nothing():
    stream = USUAL + b"\n\n" + USUAL + b"event:no_space\ndata: {}\n\n" + USUAL
    expected = asyncio.run(_sdk(stream))
    for cut in range(1, len(stream), 7):
        assert asyncio.run(_ours(stream, [cut, cut + len(USUAL)])) == expected, f"split at byte {cut}"
