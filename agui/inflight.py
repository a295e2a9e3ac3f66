"""What one sender's request bodies hold in memory together (issue #49, item 3).

A body is read only from a sender known by its headers, and only up to the cap; but the cap held per
connection, so any ordinary user's API token made the server hold 8 MiB per connection (+820 MB with
100 slow uploads). Each body a known sender sends is now counted against that sender (a user, by
token or session alike; the shared AG-UI token is one sender) from before its first byte is read to
the end of its request, which keeps it in memory until then: what it declares, or the whole cap for
one sent without a length. Past ``AGUI_MAX_BODY_BYTES_PER_USER`` a new body is refused before a byte
of it is read, with 503 and ``Retry-After`` (it is the sender's other uploads, not this body, that
are too much), and the connection is closed after the answer. Other senders are served as before.

The ledger lives on the event loop's thread (the handlers' ``handle``), so it needs no lock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings

# How long a refused sender is asked to wait: the uploads in flight are typically done by then.
RETRY_AFTER_SECONDS = 2
# Marks, in the request's scope, a body refused for its sender's bodies in flight (agui/body.py
# request_body answers it on the AG-UI routes, so the CORS middleware still adds its headers).
REFUSED = "threadline.bodies_in_flight"

_held: dict[str, int] = {}


def held_by(sender: str) -> int:
    """The bytes ``sender``'s bodies in flight are counted for now."""
    return _held.get(sender, 0)


def counted_size(content_length: str, cap: int) -> int:
    """What a body is counted for: its declared length, or the cap (reading stops one byte past it)
    when it is sent without one."""
    return int(content_length) if content_length.isdigit() else cap


@contextmanager
def counted(sender: str, size: int) -> Iterator[bool]:
    """Counts ``size`` bytes for ``sender`` while the block runs, and yields True; yields False and
    counts nothing when that would take the sender past ``AGUI_MAX_BODY_BYTES_PER_USER``."""
    now = _held.get(sender, 0)
    if now + size > settings.AGUI_MAX_BODY_BYTES_PER_USER and size > 0:
        yield False
        return
    _held[sender] = now + size
    try:
        yield True
    finally:
        left = _held.get(sender, 0) - size
        if left > 0:
            _held[sender] = left
        else:
            _held.pop(sender, None)


def refusal_message(sender_held: int) -> str:
    return (
        f"your request bodies in flight already hold {sender_held} bytes, and together they may hold at most "
        f"{settings.AGUI_MAX_BODY_BYTES_PER_USER} (AGUI_MAX_BODY_BYTES_PER_USER); retry after "
        f"{RETRY_AFTER_SECONDS} s, once they are done"
    )
