"""A Django ASGI handler that leaves no reference cycle behind a request: the base of both of the
server's handlers, the AG-UI one (agui/asgi.py) and the standard one (project/asgi.py)."""

from __future__ import annotations

import asyncio
from contextlib import closing
from typing import Any

from asgiref.sync import sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import HttpRequest, HttpResponseBase
from django.urls import set_script_prefix


class AcyclicHandler(ASGIHandler):
    """Django's ASGIHandler.handle, without the reference cycle it leaves behind every request.

    Django ends the task group that listens for the client's disconnect by raising an exception
    once the response has gone out. The exception's traceback holds the handler's frame, with the
    request and the response (an admin page's context and its rows with it), and the task group's
    exit holds the exception: a cycle, which only the cyclic collector frees. With 500 replies
    streaming, the collector's young passes came every few seconds and each stopped the event loop
    for 30 to 80 ms, freeing 28,000 to 46,000 objects that the operators' requests had left
    (bench/stream.py --operators, gc callbacks; issue #27 item 5). /agui/info left 52 a request
    here; the admin's and the API's pages left their rows in cycles of their own too (threads/admin/
    rows.py AppList, threads/api_query.py ListView).

    Here the listener is a task of its own that cancels the request's work when the client goes
    away; the work cancels the listener when it is done. Nothing is raised on the way out."""

    async def request_started(self, scope: dict[str, Any]) -> None:
        await signals.request_started.asend(sender=self.__class__, scope=scope)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with closing(body_file):
            set_script_prefix(get_script_prefix(scope))
            await self.request_started(scope)
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None
                body_file.close()
                await self.send_response(error_response, send)
                await sync_to_async(error_response.close)()
                return
            response = await self._respond(request, receive, send)
            if response is None:
                await signals.request_finished.asend(sender=self.__class__)
            else:
                await sync_to_async(response.close)()

    async def response_for(self, request: HttpRequest, send: Any) -> HttpResponseBase:
        """The view's response, to be sent next (``send_response``); ``send`` is where it goes."""
        return await self.run_get_response(request)

    async def _respond(self, request: HttpRequest, receive: Any, send: Any) -> HttpResponseBase | None:
        """The response, once sent (or as far as it went before the client went away); None when the
        client went away before there was one."""
        work = asyncio.current_task()
        assert work is not None
        listener = asyncio.get_running_loop().create_task(self.listen_for_disconnect(receive))
        gone: list[BaseException] = []
        done = False

        def heard(listened: asyncio.Task[None]) -> None:
            error = None if listened.cancelled() else listened.exception()
            if error is not None and not done:  # once the work is done, it is not to be cancelled any more
                gone.append(error)  # RequestAborted; or an ASGI message out of place, raised as Django would
                work.cancel()

        listener.add_done_callback(heard)
        response = None
        try:
            response = await self.response_for(request, send)
            await self.send_response(response, send)
        except asyncio.CancelledError:
            if not gone or work.uncancel():
                raise  # cancelled from outside (the server is stopping), not by the listener
        finally:
            done = True
            listener.cancel()
        if gone and not isinstance(gone[0], RequestAborted):
            raise gone[0]
        return response
