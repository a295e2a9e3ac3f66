"""The servers bench/stream.py measures, one per subprocess (started by bench/processes.py).

    python bench/servers.py NAME --fd N [--server uvicorn|daphne] [--loop uvloop|asyncio]

NAME is one of
  bare      baseline 1: a bare ASGI app writing pre-encoded SSE frames (bench/frames.py)
  relay     baseline 1 that reads its tokens from a model (BENCH_MODEL_URL, bench/paced_model.py):
            a frame per text delta, sent as each read brings them; no SDK, no parse, no log
  django    baseline 2: a plain Django async view (StreamingHttpResponse), Django's ASGIHandler
  sdk       the full stack (project.asgi:application) as configured by the environment
            (bench/processes.py points ANTHROPIC_BASE_URL at FakeAnthropic)
  scripted  the full stack with an in-process scripted model: this launcher replaces
            agents.runtime.provider_for in THIS process only; product code is untouched
  serve     the scripted full stack served by ``manage.py serve`` itself (its uvicorn options:
            the connection caps, the request deadline, its access log), as users run it

The listening socket is created by the parent and inherited as file descriptor N.
Every NAME runs on the same server software with the same settings: uvicorn with
httptools and uvloop (or daphne), access log off.

BENCH_PROFILE=path (bench only) gives the full stack a cProfile switch for --profile cprofile:
POST /bench/profile/start turns it on, POST /bench/profile/stop turns it off and writes its
stats to path before it answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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


_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


async def _bare_request(scope: dict[str, Any], receive: Any, send: Any) -> bool:
    """Answers lifespan messages and reads an HTTP request's body: True when there is a request to answer."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return False
    if scope["type"] != "http":
        return False
    while True:  # read the request body, as any server app must
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return True


def bare_app() -> Any:
    from frames import YIELD_EVERY, frames_for, tokens_from_query

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not await _bare_request(scope, receive, send):
            return
        query = scope.get("query_string", b"")
        frames = frames_for(tokens_from_query(query))
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        pace = tokens_from_query(query, default=0, name="pace") / 1000
        if pace:
            # ``pace=MS``: one frame every MS milliseconds, one send each, frame k due at the start
            # + k * pace (bench/paced.py: the same tokens at a model's pace).
            loop = asyncio.get_running_loop()
            due = loop.time()
            for frame in frames:
                await asyncio.sleep(max(0.0, due - loop.time()))
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                due += pace
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        for i, frame in enumerate(frames):
            await send({"type": "http.response.body", "body": frame, "more_body": True})
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


def relay_app() -> Any:
    """The bare app's frames, a token's sent as the model's text delta arrives: what any server
    that streams a model's reply must at least do for each token (a read, a send), and no more."""
    from urllib.parse import urlsplit

    from frames import frames_for, tokens_from_query

    model = urlsplit(os.environ["BENCH_MODEL_URL"])
    delta = b"text_delta"

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not await _bare_request(scope, receive, send):
            return
        query = scope.get("query_string", b"")
        tokens = tokens_from_query(query)
        frames = frames_for(tokens)
        asked = b"bench-tokens=%d bench-slow=%d" % (tokens, tokens_from_query(query, default=0, name="pace"))
        reader, writer = await asyncio.open_connection(model.hostname, model.port)
        writer.write(b"POST /v1/messages HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(asked), asked))
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        await send({"type": "http.response.body", "body": frames[0], "more_body": True})
        sent, carry = 1, b""
        try:
            while data := await reader.read(65536):
                seen = carry + data
                carry = seen[-len(delta) :]
                if count := seen.count(delta):
                    body = frames[sent] if count == 1 else b"".join(frames[sent : sent + count])
                    sent += count
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                if seen.endswith(b"\r\n0\r\n\r\n"):
                    break  # the reply's last chunk
        finally:
            writer.close()
        await send({"type": "http.response.body", "body": frames[-1], "more_body": False})

    return app


# --------------------------------------------------------------------------- baseline 2


# With BENCH_SDK_FLOOR=1 (the SDK floor of the lean-process figure): the anthropic client, made
# as the provider makes it, kept alive beside the Django view.
_SDK_CLIENT: Any = None


def django_app() -> Any:
    os.environ["DJANGO_SETTINGS_MODULE"] = "django_min"
    from django.core.asgi import get_asgi_application

    if os.environ.get("BENCH_SDK_FLOOR"):
        global _SDK_CLIENT
        import anthropic

        _SDK_CLIENT = anthropic.AsyncAnthropic(api_key="bench-not-a-key", base_url="http://127.0.0.1:9")
        _SDK_CLIENT.messages.with_streaming_response  # noqa: B018 - the resources the provider's first call loads
    return get_asgi_application()


# --------------------------------------------------------------------------- the full stack


# Set by POST /bench/slow/stop: every slow reply (``bench-slow=MS``) ends.
_SLOW_STOP: asyncio.Event | None = None


def _slow_stop() -> asyncio.Event:
    global _SLOW_STOP
    if _SLOW_STOP is None:
        _SLOW_STOP = asyncio.Event()
    return _SLOW_STOP


class ScriptedProvider:
    """A model provider with the DemoProvider interface that streams N one-token text deltas.

    N comes from ``bench-tokens=N`` in the last user message (10 when absent).
    Like a network read, it yields to the event loop every 64 deltas.
    ``bench-slow=MS`` instead streams one token every MS milliseconds until
    POST /bench/slow/stop (the open-streams and the operators benches' slow runs); it sees the
    stop at its next token.
    """

    TOKEN = "tok "
    YIELD_EVERY = 64

    def __init__(self) -> None:
        from orchestrator.providers.base import ModelInfo

        self.info = ModelInfo(
            id="bench-scripted", name="bench scripted model", provider="bench", context_window=200_000
        )

    @staticmethod
    def _number(request: Any, name: str, default: int) -> int:
        for message in reversed(request.messages):
            if message.get("role") == "user":
                match = re.search(name + r"=(\d+)", json.dumps(message.get("content")))
                return int(match.group(1)) if match else default
        return default

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        from orchestrator.providers.base import BlockDelta, BlockStart, BlockStop, ModelReply, TokenCount

        n = self._number(request, "bench-tokens", 10)
        slow_ms = self._number(request, "bench-slow", 0)
        token = self.TOKEN
        every = self.YIELD_EVERY
        yield BlockStart(0, "text")
        if slow_ms:
            stop = _slow_stop()
            n = 0
            pace = slow_ms / 1000
            loop = asyncio.get_running_loop()
            # A random phase, as independent runs have: runs started together would otherwise
            # tick together, and every stream's frame would be written in one burst.
            due = loop.time() + random.random() * pace
            while True:
                # Token k is due at the start + k * pace, as a model's tokens come over the network
                # whether the reader keeps up or not: a late reader finds them waiting.
                await asyncio.sleep(max(0.0, due - loop.time()))
                if stop.is_set():
                    break
                yield BlockDelta(0, token)
                n += 1
                due += pace
        else:
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


def _turn_off_step_checkpoints() -> None:
    """BENCH_NO_STEP_CHECKPOINTS (bench/step_checkpoints.py, this subprocess only): each step is
    committed without the run's checkpoint, as before issue #45, to measure what the checkpoints cost."""
    from threads.store import DbSessionStore

    commit = DbSessionStore.commit

    async def without_step(self: DbSessionStore, *args: Any, **kwargs: Any) -> None:
        kwargs["step"] = None
        await commit(self, *args, **kwargs)

    DbSessionStore.commit = without_step  # type: ignore[method-assign]


def threadline_app(scripted: bool) -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    if scripted:
        _install_scripted_provider()
    if os.environ.get("BENCH_NO_STEP_CHECKPOINTS"):
        _turn_off_step_checkpoints()
    from project.asgi import application

    return application


def with_slow_stop(app: Any) -> Any:
    """``app`` plus POST /bench/slow/stop, which ends every slow reply (ScriptedProvider), and
    POST /bench/slow/start, after which slow replies go on again until the next stop."""

    async def switched(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in ("/bench/slow/stop", "/bench/slow/start"):
            await app(scope, receive, send)
            return
        if scope["path"] == "/bench/slow/stop":
            _slow_stop().set()
        else:
            _slow_stop().clear()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return switched


def with_profiler(app: Any, path: str) -> Any:
    """``app`` plus the cProfile switch (see the module's docstring), so only the profiled streams are profiled,
    not the server's start-up and warm-up."""
    import cProfile

    profiler = cProfile.Profile()

    async def switched(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/bench/profile/"):
            await app(scope, receive, send)
            return
        if scope["path"] == "/bench/profile/start":
            profiler.enable()
        else:
            profiler.disable()
            profiler.dump_stats(path)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    return switched


# --------------------------------------------------------------------------- servers


def run_serve_command(sock: socket.socket) -> None:
    """``manage.py serve`` with the scripted model, on the port of the inherited socket: the command
    binds its own sockets (PORT), so the inherited one is closed first, as for daphne."""
    os.environ["PORT"] = str(sock.getsockname()[1])
    sock.close()
    threadline_app(scripted=True)
    from django.core.management import call_command

    import project.asgi

    # uvicorn imports "project.asgi:application" by name: the stop switch goes where it looks.
    project.asgi.application = with_slow_stop(project.asgi.application)  # type: ignore[assignment]
    call_command("serve")


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


def _log_long_gc(threshold: float = 0.05) -> None:
    """Logs every garbage collection that stops the process for more than ``threshold`` seconds
    (to the server's log: what a latency spike in the bench may be)."""
    import gc

    started: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif (took := time.perf_counter() - started[0]) > threshold:
            print(f"bench: gc of generation {info['generation']} took {took * 1e3:.0f} ms", file=sys.stderr, flush=True)

    gc.callbacks.append(callback)


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
    parser.add_argument("name", choices=["bare", "relay", "django", "sdk", "scripted", "serve"])
    parser.add_argument("--fd", type=int, required=True, help="inherited listening socket")
    parser.add_argument("--server", choices=["uvicorn", "daphne"], default="uvicorn")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop", help="uvicorn's event loop")
    args = parser.parse_args()

    if args.server == "daphne":
        import daphne.server  # noqa: F401  (installs Twisted's asyncio reactor before anything imports Twisted)

    sock = socket.socket(fileno=args.fd)
    if args.name == "serve":
        _exit_with_parent()
        _log_long_gc()
        run_serve_command(sock)
        return
    if args.name == "bare":
        app, lifespan = bare_app(), "on"
    elif args.name == "relay":
        app, lifespan = relay_app(), "on"
    elif args.name == "django":
        app, lifespan = django_app(), "off"  # Django's ASGIHandler does not speak lifespan
    else:
        app, lifespan = threadline_app(scripted=args.name == "scripted"), "on"
        if args.name == "scripted":
            app = with_slow_stop(app)
        if os.environ.get("BENCH_PROFILE"):
            app = with_profiler(app, os.environ["BENCH_PROFILE"])

    _exit_with_parent()
    _log_long_gc()
    if args.server == "daphne":
        serve_daphne(app, sock)
    else:
        serve_uvicorn(app, sock, lifespan, args.loop)


if __name__ == "__main__":
    main()
