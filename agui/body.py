"""Reading an AG-UI request's body: only with the token, never past the cap.

Django's ASGI handler reads the whole body (into a temporary file past 2.5 MB)
before any view runs, so the view's token and size checks used to come after a
1 GiB upload had been written to /tmp. Here the decision is made from the
headers alone: a request without the AG-UI token, or one that declares a body
over ``AGUI_MAX_BODY_BYTES``, or one whose sender's bodies in flight are at
their cap (agui/inflight.py), reaches Django with an empty body and not a byte
of its own is read; the view answers 401, 413 or 503 (with the CORS headers its
middleware adds, so a browser can read the answer) and the connection is closed
after it. Any other body is read into memory, and reading stops one byte past
the cap, so a chunked body with no Content-Length is capped too.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestAborted, RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse

from agui import inflight
from agui.http import error_response, token_sender

Message = dict[str, Any]
_EMPTY_BODY: Message = {"type": "http.request", "body": b"", "more_body": False}


def header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


def declares_over(scope: dict[str, Any], limit: int) -> bool:
    declared = header(scope, b"content-length")
    return declared.isdigit() and int(declared) > limit


def has_body(scope: dict[str, Any]) -> bool:
    return header(scope, b"content-length") not in ("", "0") or bool(header(scope, b"transfer-encoding"))


async def body_sender(scope: dict[str, Any]) -> str | None:
    """Whose body this is (agui/http.py ``token_sender``) when it is worth reading: the request has a
    token the server takes and declares no more than the cap. None: it is not read."""
    if declares_over(scope, settings.AGUI_MAX_BODY_BYTES):
        return None
    return await token_sender(header(scope, b"authorization"), header(scope, b"cookie"))


class GatedReceive:
    """An ASGI ``receive`` that stops handing out the client's body once ``withhold`` is called.

    After that the application sees the end of the body (an empty one, if it had read nothing)
    and then no further message: Django's disconnect listener waits on it and is cancelled when
    the response has been sent, and the connection is closed after that response.
    """

    def __init__(self, receive: Any) -> None:
        self._receive = receive
        self.withheld = False
        self._ended = False

    def withhold(self, *, body_read: bool = False) -> None:
        """No more of the body; ``body_read``: the application has already had part of it
        (so it gets no empty end of body either)."""
        self.withheld = True
        self._ended = self._ended or body_read

    async def __call__(self) -> Message:
        if not self.withheld:
            return dict(await self._receive())
        if not self._ended:
            self._ended = True
            return dict(_EMPTY_BODY)
        await asyncio.Event().wait()  # nothing more will come
        raise AssertionError("unreachable")


def closing_send(send: Any, gate: GatedReceive) -> Any:
    """``send`` that closes the connection after a response whose request body was left unread."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and gate.withheld:
            headers = [(k, v) for k, v in message.get("headers", []) if bytes(k).lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return wrapped


async def read_capped(receive: Any, limit: int) -> io.BytesIO:
    """The body, read into memory; past ``limit`` reading stops (one byte over, so the view refuses it)."""
    data = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestAborted()
        data += message.get("body", b"")
        if len(data) > limit:
            if isinstance(receive, GatedReceive):
                receive.withhold(body_read=True)
            del data[limit + 1 :]
            break
        if not message.get("more_body", False):
            break
    return io.BytesIO(bytes(data))


def request_body(request: HttpRequest) -> bytes | HttpResponse:
    """The body of an admitted request, or the 413 (or 400, or 503 past the sender's bodies in
    flight: agui/inflight.py) to send."""
    limit = settings.AGUI_MAX_BODY_BYTES
    held = request.scope.get(inflight.REFUSED) if isinstance(request, ASGIRequest) else None
    if held is not None:
        response = error_response(503, "bodies_in_flight", inflight.refusal_message(held))
        response["Retry-After"] = str(inflight.RETRY_AFTER_SECONDS)
        return response
    declared_header = request.headers.get("Content-Length") or "0"
    if not declared_header.isdigit():
        return error_response(400, "invalid_request", "Content-Length is not a number")
    declared = int(declared_header)
    if declared > limit:
        return error_response(413, "body_too_large", f"the body is {declared} bytes; the limit is {limit}")
    try:
        body = request.body
    except RequestDataTooBig:
        return error_response(413, "body_too_large", f"the body is larger than the limit of {limit} bytes")
    if len(body) > limit:
        return error_response(413, "body_too_large", f"the body is larger than the limit of {limit} bytes")
    return body
