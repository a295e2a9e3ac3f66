"""The pre-encoded SSE frames the two baseline servers write.

They have the shape and size of what Threadline streams for a text reply
(``id: N`` line, camelCase keys, a ``msg_<32 hex>`` message id), so the
baselines move the same bytes per event as the full stack.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache

MESSAGE_ID = "msg_" + "0123456789abcdef" * 2
TOKEN = "tok "
# Like a network read: a real stream yields to the event loop every so often.
YIELD_EVERY = 64


@lru_cache(maxsize=8)
def frames_for(n_tokens: int) -> tuple[bytes, ...]:
    frames = [
        b'id: 1\ndata: {"type":"TEXT_MESSAGE_START","messageId":"%s","role":"assistant"}\n\n' % MESSAGE_ID.encode()
    ]
    content = b'"type":"TEXT_MESSAGE_CONTENT","messageId":"%s","delta":"%s"' % (MESSAGE_ID.encode(), TOKEN.encode())
    for seq in range(2, n_tokens + 2):
        frames.append(b"id: %d\ndata: {%s}\n\n" % (seq, content))
    frames.append(
        b'id: %d\ndata: {"type":"TEXT_MESSAGE_END","messageId":"%s"}\n\n' % (n_tokens + 2, MESSAGE_ID.encode())
    )
    return tuple(frames)


def tokens_from_query(query: bytes | str, default: int = 10, name: str = "n") -> int:
    """The whole number ``name`` of the query (the token count ``n`` unless told), else ``default``."""
    if isinstance(query, bytes):
        query = query.decode("latin-1")
    for pair in query.split("&"):
        key, _, value = pair.partition("=")
        if key == name and value.isdigit():
            return int(value)
    return default


async def paced(frames: tuple[bytes, ...]):  # type: ignore[no-untyped-def]
    """The frames one at a time, yielding to the loop every YIELD_EVERY frames."""
    for i, frame in enumerate(frames):
        yield frame
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)
