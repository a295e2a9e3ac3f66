"""Whose request body the rest of the site reads (the admin, the REST API): decided from the headers.

Django's handler reads a request's whole body before any middleware or view runs, so the API's token
check and the admin's login check came after the body was in memory: 100 connections without a token
held 849 MB, and at the 8 MiB cap 2,000 could hold 16 GiB (issue #23, item 3). The AG-UI routes
already decide from the headers alone (agui/body.py); here the rest of the site does too. A sender is
known by

- an API token (``Authorization: Token <key>``, or ``Bearer``) of an active user, or the shared AG-UI
  token (the operator's, which /metrics takes), or
- a session cookie of a logged-in, active user (the admin's), checked as Django's authentication
  middleware checks it: the session exists and has not expired, its user exists and is active, and
  the hash of the user's password it holds is still the user's.

A known sender's body is read up to the cap (``DATA_UPLOAD_MAX_MEMORY_SIZE``), and while its sender's
bodies in flight together stay under ``AGUI_MAX_BODY_BYTES_PER_USER`` (agui/inflight.py). Anyone else may send
``STRANGER_BODY_MAX_BYTES``: enough for the admin's login form and a logout with its CSRF token, the
bodies a person sends before the server knows them. A stranger's body declared longer is refused at
once, without a byte of it read (401 on the API, which wants a token, 413 elsewhere), and the
connection is closed after the answer; one sent without a length is read to one byte past the small
cap and refused the same way.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestAborted

from agui import inflight
from agui.body import declares_over, has_body, header, read_capped
from agui.http import token_sender

# The admin's login form is about 200 bytes (a CSRF token, a user name, a password, a "next" URL).
STRANGER_BODY_MAX_BYTES = 16 * 1024

_API_PREFIX = "/api/"


async def known_sender(scope: dict[str, Any]) -> str | None:
    """The sender the request's headers name, when this server knows them (see the module's
    docstring), as the body ledger counts them (agui/inflight.py); else None. An Authorization
    header decides alone; without one, a signed-in session."""
    return await token_sender(header(scope, b"authorization"), header(scope, b"cookie"))


async def strangers_body(scope: dict[str, Any], receive: Any) -> bytes | None:
    """The body of a request from an unknown sender, read whole when it fits the small cap; None
    when it does not (declared longer: nothing read; sent longer: read one byte past the cap)."""
    if declares_over(scope, STRANGER_BODY_MAX_BYTES):
        return None
    body = (await read_capped(receive, STRANGER_BODY_MAX_BYTES)).getvalue()
    return None if len(body) > STRANGER_BODY_MAX_BYTES else body


def replaying(body: bytes, receive: Any) -> Any:
    """A ``receive`` that hands out ``body`` (already read) first, then whatever the client sends
    next (Django listens for the disconnect once it has the body)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> dict[str, Any]:
        if pending:
            return pending.pop()
        return dict(await receive())

    return replay


async def refuse_strangers_body(scope: dict[str, Any], send: Any) -> None:
    """The answer to a stranger's body over the small cap; the connection is closed after it (the
    body is left unread)."""
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    if scope["path"].startswith(_API_PREFIX):
        status, code = 401, "not_authenticated"
        message = (
            "send your API token as 'Authorization: Token <key>': a request body is read only from a sender "
            "known by its headers"
        )
        headers.append((b"www-authenticate", b"Token"))
    else:
        status, code = 413, "body_too_large"
        message = (
            f"a request from someone not logged in may carry a body of at most {STRANGER_BODY_MAX_BYTES} bytes; "
            "log in first"
        )
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def admitted_receive(scope: dict[str, Any], receive: Any, send: Any) -> tuple[Any, str | None] | None:
    """The ``receive`` the site's handler reads the request through, with the known sender whose
    body it is (None: no body, or a stranger's small one, already read); or None when the request
    has been refused here (or its client went away while its small body was read)."""
    if not has_body(scope):
        return receive, None
    sender = await known_sender(scope)
    if sender is not None:
        return receive, sender
    try:
        body = await strangers_body(scope, receive)
    except RequestAborted:
        return None
    if body is None:
        await refuse_strangers_body(scope, send)
        return None
    return replaying(body, receive), None


async def refuse_bodies_in_flight(send: Any, held: int) -> None:
    """The answer to a known sender whose bodies in flight are at their cap (agui/inflight.py): 503
    with Retry-After, the body left unread and the connection closed after it."""
    body = json.dumps({"error": {"code": "bodies_in_flight", "message": inflight.refusal_message(held)}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"connection", b"close"),
        (b"retry-after", str(inflight.RETRY_AFTER_SECONDS).encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
