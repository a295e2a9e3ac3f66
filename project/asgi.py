"""ASGI entry point: AG-UI routes go to a lean handler, everything else to Django's standard one.

With ``AGUI_PORT`` set the server listens on two ports (``manage.py serve``): on
that one only the AG-UI routes exist, and the main port no longer answers them,
so a browser origin allowed to reach AG-UI cannot reach the admin or the API.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

django.setup(set_prefix=False)

from asgiref.sync import SyncToAsync, ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.handlers.asgi import ASGIRequest
from django.http import FileResponse, HttpRequest, HttpResponseBase

from agui import inflight
from agui.acyclic import AcyclicHandler
from agui.asgi import AguiHandler
from agui.body import GatedReceive, closing_send, declares_over, header, read_capped
from project.bodygate import admitted_receive, refuse_bodies_in_flight
from project.fdlimit import raise_open_file_limit
from project.gctune import tune_gc
from threads.dbthread import tune_switch_interval

raise_open_file_limit()


class _EarlySend:
    """One response's send, begun on the loop the moment the request's thread hands it over."""

    def __init__(self, handler: StandardHandler, send: Any) -> None:
        self._handler = handler
        self._send = send
        self._task: asyncio.Task[None] | None = None
        self._abandoned = False
        self._context = contextvars.copy_context()  # the request's task's, not the thread's

    def start(self, response: HttpResponseBase) -> None:
        if self._abandoned:
            return  # the request was cancelled (its client went away) while the view ran
        sending = self._handler.send_in_full(response, self._send)
        self._task = asyncio.Task(sending, loop=asyncio.get_running_loop(), context=self._context, eager_start=True)

    def abandon(self) -> None:
        self._abandoned = True
        if self._task is not None:
            self._task.cancel()

    async def finished(self) -> None:
        assert self._task is not None, "the response was handed over before the crossing ended"
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            self._task.cancel()
            raise


# Responses whose send has begun, until the handler's send_response waits for it to end.
_EARLY_SENDS: weakref.WeakKeyDictionary[HttpResponseBase, _EarlySend] = weakref.WeakKeyDictionary()


class _RequestThreads:
    """The standard handler's request threads, kept from one request to the next.

    Django runs each request in a thread-sensitive context of its own, and asgiref gave each such
    context a new thread, started from the event loop, which waited for it to run, and a second one
    to join it once the response was sent: two threads started per admin page or API call. With 500
    replies streaming, the loop waited in ``Thread.start`` 40 samples of py-spy's 3,500 (bench/
    stream.py --operators --operators-profile), while every stream waited with it. Here a request
    takes an idle thread (a new one only when none is idle) and gives it back when its work on it
    is done, work that outlived the request (a view still running after its client went away)
    included: until then no other request gets it. As with a threaded WSGI server, a thread serves
    one request at a time, and a request's sync work all runs on its one thread."""

    KEEP = 32  # idle threads kept; more are let go as they come back

    def __init__(self) -> None:
        self._idle: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()  # threads come back from their own threads

    def take(self) -> ThreadPoolExecutor:
        try:
            with self._lock:
                return self._idle.pop()
        except IndexError:
            # One worker: asgiref requires a context's executor to run one call at a time on one thread.
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="request")

    def give_back(self, executor: ThreadPoolExecutor) -> None:
        executor.submit(self._idle_again, executor)  # runs once what the request left there has run

    def _idle_again(self, executor: ThreadPoolExecutor) -> None:  # on the executor's own thread
        with self._lock:
            kept = len(self._idle) < self.KEEP
            if kept:
                self._idle.append(executor)
        if not kept:
            executor.shutdown(wait=False)


REQUEST_THREADS = _RequestThreads()
# Set in a request's context by StandardHandler; goes wherever that context is copied.
_OWN_REQUEST: contextvars.ContextVar[bool] = contextvars.ContextVar("standard_request", default=False)


class StandardHandler(AcyclicHandler):
    """Django's handler for everything but the AG-UI routes (admin, REST API, static files). A body
    is read only from a sender known by the headers (project/bodygate.py; anyone else may send a
    login form's worth), in memory and capped as there: a body declared over the cap is not read
    (Django answers 400 for it), and a longer one is cut one byte past the cap.

    Its views and middleware are all sync. Django's ASGIHandler builds the chain for async calls and
    crosses from the event loop to the request's thread and back for each middleware's hooks and for
    the view, about twenty crossings for an admin page; while the loop streams hundreds of replies,
    each crossing waits for the loop and for the GIL, and the admin's pages waited seconds (issue
    #27, item 5). Here the chain is built sync and called whole on the request's thread: one
    crossing, request_started's receivers included, besides Django's close once the response is
    sent (bench/stream.py --operators). Letting the thread have the GIL meanwhile, as the database
    thread has it (threads/dbthread.py sharing_the_gil), made no difference there, so it does not.
    Django's ``handle`` is replaced by AcyclicHandler's, which leaves no reference cycle behind the
    request (agui/acyclic.py)."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def request_started(self, scope: dict[str, Any]) -> None:
        """Sent on the request's thread, as the crossing that runs the chain begins (``start_and_respond``).

        Django sends it from the loop with ``asend``, a crossing of its own to the request's thread
        and back before the view's. With 500 replies streaming, each way back to the loop waited
        40 to 90 ms for the loop's turns (asgiref's future, its shield and the task's wake-up are a
        turn each), and the API's list spent more time in that crossing than in its view (bench/
        stream.py --operators, timed at each step; issue #27 item 5). Its receivers act on the
        connections of the thread they run on, which is the same thread either way. A request that
        Django refuses before there is one (``create_request``: a 400 or a 413) has it sent on the
        loop, so that its receivers see it start as they see it finish."""

    def create_request(
        self, scope: Mapping[str, Any], body_file: IO[bytes]
    ) -> tuple[ASGIRequest, None] | tuple[None, HttpResponseBase]:
        created = super().create_request(scope, body_file)
        if created[0] is None:
            signals.request_started.send(sender=self.__class__, scope=scope)
        return created

    async def response_for(self, request: HttpRequest, send: Any) -> HttpResponseBase:
        """The response, its sending already begun on the loop's first turn after the view returned.

        The view's crossing back to the loop takes three of the loop's turns (asgiref's future, its
        shield, the task's wake-up), and with 500 replies streaming a turn lasts 10 to 30 ms. The
        thread hands the response over as it returns, and the loop starts sending it in the turn
        that call arrives in (an eagerly started task, which runs until it must wait); the request's
        task goes on once the crossing is over, as before, and waits for that send to end."""
        loop = asyncio.get_running_loop()
        early = _EarlySend(self, send)

        def answered(response: HttpResponseBase) -> None:  # on the request's thread
            loop.call_soon_threadsafe(early.start, response)

        try:
            response = await sync_to_async(self.start_and_respond, thread_sensitive=True)(request, answered)
        except BaseException:
            early.abandon()
            raise
        _EARLY_SENDS[response] = early
        return response

    async def send_response(self, response: HttpResponseBase, send: Any) -> None:
        early = _EARLY_SENDS.pop(response, None)
        if early is None:
            await super().send_response(response, send)
        else:
            await early.finished()

    def start_and_respond(
        self, request: HttpRequest, answered: Callable[[HttpResponseBase], None] | None = None
    ) -> HttpResponseBase:
        assert isinstance(request, ASGIRequest)
        signals.request_started.send(sender=self.__class__, scope=request.scope)
        response = self.get_response(request)
        response._handler_class = self.__class__  # type: ignore[attr-defined]  # what Django's run_get_response does
        if isinstance(response, FileResponse):
            response.block_size = self.chunk_size
        if answered is not None:
            answered(response)
        return response

    async def send_in_full(self, response: HttpResponseBase, send: Any) -> None:
        await super().send_response(response, send)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        enclosing = SyncToAsync.thread_sensitive_context.get(None)
        if enclosing is not None and not _OWN_REQUEST.get():
            # Called within an enclosing application's thread-sensitive context: its thread serves.
            await super().__call__(scope, receive, send)
            return
        # A context of one of our own requests is not an enclosing one: it reached this request by
        # the connection (a server's read callback registered while that request read its body
        # copies the request's context, and the next request on the connection starts from it).
        # Its thread went back to the pool with that request, and asgiref refuses it once exited.
        # The outermost context wins: Django's own ThreadSensitiveContext inside __call__ then
        # leaves this one, and the kept thread, in place.
        # ``manage.py serve`` starts every request from a fresh context (project/server.py
        # uvicorn_options); a server that does not (runserver's daphne, uvicorn's defaults) may
        # start one from its predecessor's, as above.
        _OWN_REQUEST.set(True)
        executor = REQUEST_THREADS.take()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await super().__call__(scope, receive, send)
        finally:
            REQUEST_THREADS.give_back(executor)

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        admission = await admitted_receive(scope, receive, send)
        if admission is None:
            return  # refused (or gone) before Django saw it
        admitted, sender = admission
        gate = GatedReceive(admitted)
        cap = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if declares_over(scope, cap):
            gate.withhold()
            sender = None  # nothing of it is read: nothing to count
        if sender is None:
            await super().handle(scope, gate, closing_send(send, gate))
            return
        with inflight.counted(sender, inflight.counted_size(header(scope, b"content-length"), cap)) as counted:
            if not counted:
                await refuse_bodies_in_flight(send, inflight.held_by(sender))
                return
            await super().handle(scope, gate, closing_send(send, gate))

    async def read_body(self, receive: Any) -> io.BytesIO:
        return await read_capped(receive, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


django_app = StandardHandler()
agui_app = AguiHandler()


tune_gc()
tune_switch_interval()


_KEPT_FRESH: list[asyncio.Task[None]] = []


def keep_fresh() -> None:
    """What every request reads (the enabled agents, the MCP configuration) is read again as it
    ages, not when a request finds it old (agents/refreshed.py ``keep_fresh``); the lifespan starts
    this on the server's loop."""
    from agents.mcp.pool import CONFIGURED_SERVERS
    from agui.views import ENABLED_AGENTS

    loop = asyncio.get_running_loop()
    _KEPT_FRESH[:] = [loop.create_task(ENABLED_AGENTS.keep_fresh()), loop.create_task(CONFIGURED_SERVERS.keep_fresh())]


def stop_keeping_fresh() -> None:
    """Stops ``keep_fresh``'s reads (at shutdown, and in the tests' in-process server, whose tests
    each have a database of their own)."""
    for task in _KEPT_FRESH:
        task.cancel()
    _KEPT_FRESH.clear()


async def _lifespan(receive: Any, send: Any) -> None:
    from agents.mcp.pool import mcp_servers_ready, stop_mcp_servers
    from agui.runs import background_surface
    from runhost.host import HOST

    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            HOST.start_sweeper(background_surface)
            # MCP servers start before the first request, so the first run does not wait for them.
            await mcp_servers_ready()
            keep_fresh()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            stop_keeping_fresh()
            # Runs in flight are handed over at a step boundary (runhost/drain.py); a SIGTERM has
            # done so already (project/draining.py), before the server stopped listening.
            await HOST.shutdown(drain=settings.SERVER_DRAIN_SECONDS)
            await stop_mcp_servers()
            await send({"type": "lifespan.shutdown.complete"})
            return


# CopilotKit's runtime routes (agui/copilotkit/) are AG-UI streams too: the same lean handler.
_AGUI_PREFIXES = (settings.AGUI_PATH + "/", settings.COPILOTKIT_PATH + "/")


async def _not_found(send: Any, message: str) -> None:
    body = json.dumps({"error": {"code": "not_found", "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _on_agui_port(scope: dict[str, Any]) -> bool:
    server = scope.get("server")  # (host, port) of the listening socket
    return server is not None and server[1] == settings.AGUI_PORT


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    if scope["type"] != "http":
        await django_app(scope, receive, send)
        return
    is_agui = scope["path"].startswith(_AGUI_PREFIXES) or scope["path"] == settings.COPILOTKIT_PATH
    if settings.AGUI_PORT and is_agui != _on_agui_port(scope):
        if is_agui:
            await _not_found(send, "AG-UI is served on a port of its own, not this one")
        else:
            await _not_found(
                send,
                f"this port serves only the AG-UI routes under {settings.AGUI_PATH}/ and {settings.COPILOTKIT_PATH}/",
            )
        return
    if is_agui:
        await agui_app(scope, receive, send)
    else:
        await django_app(scope, receive, send)
