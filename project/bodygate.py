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

A known sender's body is read up to the cap (``DATA_UPLOAD_MAX_MEMORY_SIZE``). Anyone else may send
``STRANGER_BODY_MAX_BYTES``: enough for the admin's login form and a logout with its CSRF token, the
bodies a person sends before the server knows them. A stranger's body declared longer is refused at
once, without a byte of it read (401 on the API, which wants a token, 413 elsewhere), and the
connection is closed after the answer; one sent without a length is read to one byte past the small
cap and refused the same way.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.http.cookie import parse_cookie

from agui.body import declares_over, has_body, header, read_capped
from agui.http import token_admits
from threads.dbthread import on_db_thread
from threads.selectors import session_user_id

# The admin's login form is about 200 bytes (a CSRF token, a user name, a password, a "next" URL).
STRANGER_BODY_MAX_BYTES = 16 * 1024

_API_PREFIX = "/api/"


async def sender_known(scope: dict[str, Any]) -> bool:
    """Whether the request's headers name a sender this server knows (see the module's docstring)."""
    authorization = header(scope, b"authorization")
    if authorization and await token_admits(authorization):
        return True
    session_key = _cookies(scope).get(settings.SESSION_COOKIE_NAME, "")
    return bool(session_key) and await on_db_thread(session_user_active, session_key=session_key)


def _cookies(scope: dict[str, Any]) -> dict[str, str]:
    # HTTP/2 may split the cookies over several headers; they are one list.
    values = [bytes(v).decode("latin-1") for k, v in scope.get("headers", ()) if bytes(k).lower() == b"cookie"]
    return parse_cookie("; ".join(values))


def session_user_active(*, session_key: str) -> bool:
    """Whether ``session_key`` is the session of a logged-in, active user, by Django's own checks
    (threads/selectors.py ``session_user_id``)."""
    return session_user_id(session_key=session_key) is not None


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


async def admitted_receive(scope: dict[str, Any], receive: Any, send: Any) -> Any | None:
    """The ``receive`` the site's handler reads the request through, or None when the request has
    been refused here (or its client went away while its small body was read)."""
    if not has_body(scope) or await sender_known(scope):
        return receive
    try:
        body = await strangers_body(scope, receive)
    except RequestAborted:
        return None
    if body is None:
        await refuse_strangers_body(scope, send)
        return None
    return replaying(body, receive)
