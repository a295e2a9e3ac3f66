"""The server processes bench/stream.py measures, one per subprocess.

    python bench/servers.py KIND --fd N [--server uvicorn|daphne]

KIND is one of
  bare                 baseline 1: a bare ASGI app writing pre-encoded SSE frames
  django               baseline 2: a plain Django async view (StreamingHttpResponse), Django's ASGIHandler
  threadline           the full stack (project.asgi:application) as configured by the environment
                       (bench/stream.py points ANTHROPIC_BASE_URL at FakeAnthropic)
  threadline-scripted  the full stack with an in-process scripted model: this launcher replaces
                       agents.runtime.provider_for in THIS process only; product code is untouched

The listening socket is created by the parent and inherited as file descriptor N,
so there is no race for the port. Both servers run with the same settings for
every KIND: uvicorn with uvloop and httptools (or daphne), access log off.

Environment flags (bench only):
  BENCH_PROFILE=path  cProfile the event-loop thread for the life of the server; stats written at exit
  BENCH_TRACE=path    time the phases before the first byte of each /agui/ request; JSON written at exit
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
for entry in (BENCH_DIR, REPO):
    if entry not in sys.path:
        sys.path.insert(0, entry)


# --------------------------------------------------------------------------- baseline 1


def bare_app() -> Any:
    from frames import YIELD_EVERY, frames_for, tokens_from_query

    headers = [
        (b"content-type", b"text/event-stream; charset=utf-8"),
        (b"cache-control", b"no-cache"),
        (b"x-accel-buffering", b"no"),
    ]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        while True:  # read the request body, as any server app must
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        frames = frames_for(tokens_from_query(scope.get("query_string", b"")))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i, frame in enumerate(frames):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


# --------------------------------------------------------------------------- baseline 2


def django_app() -> Any:
    os.environ["DJANGO_SETTINGS_MODULE"] = "django_min"
    from django.core.asgi import get_asgi_application

    return get_asgi_application()


# --------------------------------------------------------------------------- the full stack


class ScriptedProvider:
    """A model provider with the DemoProvider interface that streams N one-token text deltas.

    N comes from ``bench-tokens=N`` in the last user message (10 when absent).
    Like a network read, it yields to the event loop every 64 deltas.
    """

    TOKEN = "tok "
    YIELD_EVERY = 64

    def __init__(self) -> None:
        from agents.providers.base import ModelInfo

        self.info = ModelInfo(
            id="bench-scripted", name="bench scripted model", provider="bench", context_window=200_000
        )

    @staticmethod
    def _tokens(request: Any) -> int:
        for message in reversed(request.messages):
            if message.get("role") == "user":
                match = re.search(r"bench-tokens=(\d+)", json.dumps(message.get("content")))
                return int(match.group(1)) if match else 10
        return 10

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from agents.providers.base import BlockDelta, BlockStart, BlockStop, ModelReply, TokenCount

        n = self._tokens(request)
        token = self.TOKEN
        every = self.YIELD_EVERY
        yield BlockStart(0, "text")
        for i in range(n):
            yield BlockDelta(0, token)
            if i % every == every - 1:
                await asyncio.sleep(0)
        yield BlockStop(0)
        yield ModelReply(
            content=[{"type": "text", "text": token * n}],
            stop_reason="end_turn",
            usage=TokenCount(input_tokens=25, output_tokens=n),
            model=self.info.id,
        )


def _install_scripted_provider() -> None:
    """Replaces provider_for everywhere it was imported (``from agents.runtime import provider_for``)."""
    import agents.runtime

    original = agents.runtime.provider_for
    provider = ScriptedProvider()

    def scripted_provider_for(agent: Any) -> ScriptedProvider:
        return provider

    import agui.runs
    import agui.views  # noqa: F401

    patched = []
    for name, module in list(sys.modules.items()):
        if getattr(module, "provider_for", None) is original:
            module.provider_for = scripted_provider_for
            patched.append(name)
    if "agui.runs" not in patched or "agui.views" not in patched:
        raise SystemExit(f"bench: could not install the scripted provider (patched {patched})")


# --------------------------------------------------------------------------- what-if experiments
#
# BENCH_WHATIF=fast-log,agent-cache,lean-open swaps in prototypes of the changes
# the benchmark report suggests, IN THIS PROCESS ONLY, to measure what they would
# buy. They are sketches for measurement, not product code.


def _whatif_fast_log() -> None:
    """The event log keeps plain tuples on the hot path and writes them with one executemany per batch.

    (threads/eventlog.py adopted this in commit facd8cf; kept to compare against older trees.)"""
    from asgiref.sync import sync_to_async
    from django.db import connection, transaction
    from django.utils import timezone

    import agui.runs
    from threads.eventlog import EventLogWriter
    from threads.models import RunEvent

    meta = RunEvent._meta
    run_field = meta.get_field("run")
    created_field = meta.get_field("created_at")
    columns = ", ".join(
        connection.ops.quote_name(meta.get_field(name).column)
        for name in ("run", "seq", "type", "payload", "created_at")
    )
    sql = f"INSERT INTO {connection.ops.quote_name(meta.db_table)} ({columns}) VALUES (%s, %s, %s, %s, %s)"

    class FastEventLogWriter(EventLogWriter):
        def append(self, seq: int, type_: str, payload: str) -> None:
            pending = self._pending
            pending.append((seq, type_, payload))  # type: ignore[arg-type]
            if len(pending) == 1 or len(pending) >= self.batch:
                self._wake.set()

        def _insert(self, chunk: list[tuple[int, str, str]]) -> None:
            run = run_field.target_field.get_db_prep_value(self.run_pk, connection, prepared=False)  # type: ignore[union-attr]
            now = created_field.get_db_prep_value(timezone.now(), connection, prepared=False)
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.executemany(sql, [(run, seq, type_, payload, now) for seq, type_, payload in chunk])

        async def _write(self, chunk: list[Any]) -> None:
            await sync_to_async(self._insert)(chunk)
            self.written += len(chunk)
            if hasattr(self, "writes"):
                self.writes += 1

    agui.runs.EventLogWriter = FastEventLogWriter  # type: ignore[misc]


def _whatif_agent_cache() -> None:
    """The view looks the agent up once per process instead of once per request."""
    from agui import views

    original = views._agent
    cache: dict[str, Any] = {}

    async def cached_agent(name: str) -> Any:
        agent = cache.get(name)
        if agent is None:
            agent = cache[name] = await original(name)
        return agent

    views._agent = cached_agent


def _whatif_lean_open() -> None:
    """run_open for a thread not seen before: four INSERTs in one transaction, no get_or_create
    savepoints, no full_clean() queries, no lookups a new thread cannot match. An existing thread
    makes the thread INSERT fail (unique agui_thread_id) and takes the full path."""
    from django.db import IntegrityError, transaction

    from agui import views
    from threads import services
    from threads.models import Message, Run, Session, Thread

    original = services.run_open
    seen: set[str] = set()

    def lean_run_open(**kwargs: Any) -> Any:
        message = kwargs["new_user_message"]
        if message is None or kwargs["agui_thread_id"] in seen:
            return original(**kwargs)
        seen.add(kwargs["agui_thread_id"])  # a thread id seen by this process goes the full way next time
        try:
            with transaction.atomic():
                thread = Thread.objects.create(
                    agui_thread_id=kwargs["agui_thread_id"], agent=kwargs["agent"], title=services._title_from(message)
                )
                session = Session.objects.create(thread=thread)
                run = Run.objects.create(
                    thread=thread, agui_run_id=kwargs["agui_run_id"], protocol_version=kwargs["protocol_version"]
                )
                Message.objects.create(
                    thread=thread, position=0, message_id=message["id"], role=message["role"], body=message
                )
        except IntegrityError:
            # The thread exists already (or the message id is taken): the full path decides.
            return original(**kwargs)
        return services.OpenedThread(thread, session, {message["id"]}, run)

    views.run_open = lean_run_open


def _whatif_db_thread() -> None:
    """AG-UI requests do their database work on one long-lived thread with a persistent connection,
    instead of a new thread (and a new SQLite connection with its PRAGMAs) per request."""
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import ThreadSensitiveContext
    from django.conf import settings
    from django.db import connections

    from agui.asgi import AguiHandler

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agui-db")
    for alias in settings.DATABASES:
        settings.DATABASES[alias]["CONN_MAX_AGE"] = None
        connections.settings[alias]["CONN_MAX_AGE"] = None

    async def call(self: Any, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async with ThreadSensitiveContext(executor=executor):
            await self.handle(scope, receive, send)

    AguiHandler.__call__ = call  # type: ignore[method-assign]


WHATIFS = {
    "fast-log": _whatif_fast_log,
    "agent-cache": _whatif_agent_cache,
    "lean-open": _whatif_lean_open,
    "db-thread": _whatif_db_thread,
}


def threadline_app(scripted: bool) -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    if scripted:
        _install_scripted_provider()
    for name in filter(None, os.environ.get("BENCH_WHATIF", "").split(",")):
        WHATIFS[name.strip()]()
    from project.asgi import application

    return application


# --------------------------------------------------------------------------- TTFB trace


class Trace:
    """Per-request timings of what happens before the first byte of an /agui/ response."""

    def __init__(self) -> None:
        self.records: list[dict[str, float]] = []
        self.current: dict[str, float] | None = None

    def add(self, label: str, seconds: float) -> None:
        if self.current is not None:
            self.current[label] = self.current.get(label, 0.0) + seconds


def install_trace(application: Any) -> tuple[Any, Trace]:
    import django.db.models.query as query_module
    from django.core import signals
    from django.db.backends.base.base import BaseDatabaseWrapper

    from agui import views
    from agui.asgi import AguiHandler

    trace = Trace()
    clock = time.perf_counter

    def timed_async(label: str, fn: Any) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return await fn(*args, **kwargs)
            finally:
                trace.add(label, clock() - start)

        return wrapper

    def timed_sync(label: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                trace.add(label, clock() - start)

        return wrapper

    def traced_sync_to_async(original: Any) -> Any:
        def factory(func: Any, *s2a_args: Any, **s2a_kwargs: Any) -> Any:
            label = getattr(func, "__name__", "sync")
            inner = timed_sync(f"{label}: in thread", func)
            adapted = original(inner, *s2a_args, **s2a_kwargs)
            return timed_async(f"{label}: awaited", adapted)

        return factory

    views.sync_to_async = traced_sync_to_async(views.sync_to_async)
    query_module.sync_to_async = traced_sync_to_async(query_module.sync_to_async)  # afirst(), abulk_create()
    views._agent = timed_async("views._agent (Agent afirst)", views._agent)
    views.decode_run_input = timed_sync("views.decode_run_input", views.decode_run_input)
    views.start_run = timed_sync("runs.start_run", views.start_run)
    signals.request_started.asend = timed_async("signal request_started (asend)", signals.request_started.asend)
    AguiHandler.read_body = timed_async("handler.read_body", AguiHandler.read_body)
    AguiHandler.get_response_async = timed_async(
        "handler.get_response_async (middleware+view)", AguiHandler.get_response_async
    )
    BaseDatabaseWrapper.connect = timed_sync("db connect (new connection)", BaseDatabaseWrapper.connect)

    async def traced(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/agui/") or scope["method"] != "POST":
            await application(scope, receive, send)
            return
        record: dict[str, float] = {}
        trace.current = record
        start = clock()

        async def traced_send(message: dict[str, Any]) -> None:
            now = clock()
            if message["type"] == "http.response.start":
                record["= ASGI call -> response.start"] = now - start
            elif "= ASGI call -> first body" not in record and message.get("body"):
                record["= ASGI call -> first body"] = now - start
                trace.current = None  # what follows is the run, not the first byte
            await send(message)

        try:
            await application(scope, receive, traced_send)
        finally:
            trace.records.append(record)
            if trace.current is record:
                trace.current = None

    return traced, trace


# --------------------------------------------------------------------------- servers


def serve_uvicorn(app: Any, sock: socket.socket, lifespan: str, loop: str) -> None:
    import uvicorn

    config = uvicorn.Config(app, loop=loop, http="httptools", lifespan=lifespan, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


def serve_daphne(app: Any, sock: socket.socket) -> None:
    from daphne.server import Server

    # Twisted's asyncio reactor cannot adopt an inherited socket: free the port and bind it again.
    host, port = sock.getsockname()[:2]
    sock.close()
    Server(
        application=app,
        endpoints=[f"tcp:port={port}:interface={host}"],
        signal_handlers=True,
        verbosity=0,
    ).run()


def _exit_with_parent() -> None:
    """Stops this server if bench/stream.py dies without stopping it (say, SIGKILL)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["bare", "django", "threadline", "threadline-scripted"])
    parser.add_argument("--fd", type=int, required=True, help="inherited listening socket")
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop", help="uvicorn's event loop")
    args = parser.parse_args()

    if args.server == "daphne":
        import daphne.server  # noqa: F401  (installs Twisted's asyncio reactor before anything imports Twisted)

    sock = socket.socket(fileno=args.fd)
    if args.kind == "bare":
        app, lifespan = bare_app(), "on"
    elif args.kind == "django":
        app, lifespan = django_app(), "off"  # Django's ASGIHandler does not speak lifespan
    else:
        app, lifespan = threadline_app(scripted=args.kind == "threadline-scripted"), "on"

    trace = None
    if os.environ.get("BENCH_TRACE"):
        app, trace = install_trace(app)

    _exit_with_parent()
    # uvicorn re-raises the signal that stopped it once it has shut down; exit
    # through Python instead so the profile and the trace below get written.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))

    profiler = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        if args.server == "daphne":
            serve_daphne(app, sock)
        else:
            serve_uvicorn(app, sock, lifespan, args.loop)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(os.environ["BENCH_PROFILE"])
        if trace is not None:
            with open(os.environ["BENCH_TRACE"], "w") as fh:
                json.dump(trace.records, fh)


if __name__ == "__main__":
    main()
