"""The AG-UI routes' own Django handler, with only the middleware they need.

It also reads request bodies its own way (agui/body.py): not at all without the
token or past the declared cap, and in memory, one byte past the cap at most.

The standard middleware stack (sessions, CSRF, auth, messages) costs over a
millisecond per request and nothing on the AG-UI path uses it: requests there
authenticate with the bearer token. CORS stays. Its URLconf has the AG-UI routes
alone (agui/root_urls.py).

Django runs each request in a thread-sensitive context of its own, and asgiref
gives each such context its own OS thread for the request's sync work (the
request_started/finished signal handlers, any async ORM call), kept until the
response ends. An SSE stream lasts as long as its run, so every open stream held
a thread: 10,000 reattaches, 10,000 threads (issue #14). The AG-UI handler runs
its requests' sync work on one shared thread instead: it is a handful of short
calls per request (the database work of the AG-UI views and runs goes to the
database thread, threads/dbthread.py), so one thread serves them all and the
thread count no longer grows with the streams.
"""

from __future__ import annotations

import io
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from contextlib import aclosing
from typing import Any

from asgiref.sync import ThreadSensitiveContext
from django.conf import settings
from django.core import signals
from django.http import HttpRequest, HttpResponseBase

from agui import inflight
from agui.acyclic import AcyclicHandler
from agui.body import GatedReceive, body_sender, closing_send, has_body, header, read_capped
from agui.http import SseResponse

# One worker: asgiref requires a context's executor to run one call at a time on one thread.
REQUEST_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agui-request")


class AguiHandler(AcyclicHandler):
    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        gate = GatedReceive(receive)
        sender = await body_sender(scope) if has_body(scope) else None
        if sender is None:
            if has_body(scope):
                gate.withhold()  # the view answers 401 or 413 without the body
            await super().handle(scope, gate, closing_send(send, gate))
            return
        size = inflight.counted_size(header(scope, b"content-length"), settings.AGUI_MAX_BODY_BYTES)
        with inflight.counted(sender, size) as admitted:
            if not admitted:
                gate.withhold()  # the view answers 503 without the body (agui/body.py request_body)
                scope[inflight.REFUSED] = inflight.held_by(sender)
            await super().handle(scope, gate, closing_send(send, gate))

    async def request_started(self, scope: dict[str, Any]) -> None:
        """Sent here, on the event loop, not on the request's thread.

        Django sends request_started with ``asend``, which takes every request to the request's
        thread and back before its view starts: a fifth of a run's time to its first byte
        (bench/stream.py's TTFB; issue #27 item 4). Its receivers are Django's reset_queries and
        close_old_connections, which act on the connections of the thread they run on. The AG-UI
        routes open none on the loop's thread or the request's: their database work is done on the
        database thread (threads/dbthread.py), which drops a failed connection itself. So here
        they have nothing to do, and cost no crossing. request_finished is still sent by the
        response's close, on the request's thread, after the response has gone out."""
        signals.request_started.send(sender=self.__class__, scope=scope)

    async def read_body(self, receive: Any) -> io.BytesIO:
        return await read_capped(receive, settings.AGUI_MAX_BODY_BYTES)

    def load_middleware(self, is_async: bool = False) -> None:
        # BaseHandler reads settings.MIDDLEWARE; swap in the AG-UI list while
        # this handler builds its chain (once, at start-up).
        standard = settings.MIDDLEWARE
        settings.MIDDLEWARE = settings.AGUI_MIDDLEWARE
        try:
            super().load_middleware(is_async=is_async)
        finally:
            settings.MIDDLEWARE = standard

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        # The AG-UI routes alone (agui/root_urls.py): resolving them imports neither the admin nor the REST API.
        request.urlconf = "agui.root_urls"
        return await super().get_response_async(request)

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        """An SSE stream's chunks go out as they come. Django's own loop wraps each part of a
        streaming response in two generators, a bytes conversion and a 64 KiB split, which
        were a tenth of the event loop's time with 10,000 streams open (bench/stream.py
        --streams, py-spy); the frames are bytes already."""
        if not isinstance(response, SseResponse):
            await super().send_response(response, send)
            return
        headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
        headers += [(b"Set-Cookie", c.OutputString().encode("ascii")) for c in response.cookies.values()]
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        if isinstance(response.chunks, AsyncGenerator):
            async with aclosing(response.chunks) as chunks:
                async for chunk in chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        else:  # a live run's (agui/stream.py LiveFrames)
            await response.chunks.send_to(send)
        await send({"type": "http.response.body"})

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # The outermost context wins: Django's own ThreadSensitiveContext inside
        # __call__ then leaves this one (and its shared executor) in place.
        async with ThreadSensitiveContext(executor=REQUEST_EXECUTOR):
            await super().__call__(scope, receive, send)
