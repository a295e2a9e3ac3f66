"""What keeps an operator's pages quick while replies stream (issue #27, item 5; bench/operators.py
times them under load).

The admin's and the API's requests cross from the event loop to their thread once for the view, its
middleware and Django's request_started (project/asgi.py StandardHandler), not once for each
middleware's hook, again for the view and before both for the signal: under load each crossing
waits for the busy loop, and the admin's pages waited seconds.
The requests go through the real application (project.asgi.application) on an event loop that counts
what other threads hand back to it, and the request's thread is an executor of the test's own.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import ThreadSensitiveContext
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token

from threads.models import Thread

# The view with its whole middleware chain and request_started, and Django's close once it is sent.
MOST_CROSSINGS = 2
# The view's response handed over as it returns, the end of the view's crossing, and the close's.
MOST_RETURNS = 3


class CountingExecutor(ThreadPoolExecutor):
    """One thread, as asgiref requires of a request's executor; counts what is handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="test-request")
        self.calls = 0
        self.threads: set[int] = set()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.calls += 1

        def call() -> Any:
            self.threads.add(threading.get_ident())
            return fn(*args, **kwargs)

        return super().submit(call)


class CountingLoop(asyncio.SelectorEventLoop):
    """Counts the calls other threads hand back to the loop (each is one return from a thread) and
    its turns (under load each lasts as long as the work that was ready, 10 to 30 ms)."""

    def __init__(self) -> None:
        super().__init__()
        self.returns = 0
        self.turn = 0
        self.returned_in: list[int] = []  # the turn each return arrived in
        self.first_byte_in: int | None = None

    def call_soon_threadsafe(self, callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
        self.returns += 1
        self.returned_in.append(self.turn)
        return super().call_soon_threadsafe(callback, *args, context=context)

    def _run_once(self) -> None:
        self.turn += 1
        super()._run_once()  # type: ignore[misc]


async def _get(
    path: str,
    headers: dict[str, str],
    executor: CountingExecutor | None,
    first_byte: list[int] | None = None,
    query_string: bytes = b"",
    gone_at_once: bool = False,
    on_start: Callable[[], None] | None = None,
) -> tuple[int | None, bytes]:
    """The response's status (None if none was sent) and body; ``first_byte`` gets the loop's returns
    when its first byte was sent. ``gone_at_once``: the client disconnects right after its request.
    ``executor`` None: the application picks the request's thread itself, as under a server.
    ``on_start`` is called in the request's own context as its response starts."""
    from project.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")] + [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict[str, Any]] = []
    first_byte = first_byte if first_byte is not None else []
    asked = False
    done = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if not gone_at_once:
            await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            if on_start is not None:
                on_start()
            loop = asyncio.get_running_loop()
            first_byte.append(getattr(loop, "returns", -1))
            if isinstance(loop, CountingLoop):
                loop.first_byte_in = loop.turn
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()

    if executor is None:
        await application(scope, receive, send)
    else:
        async with ThreadSensitiveContext(executor=executor):
            await application(scope, receive, send)
    status = next((m["status"] for m in sent if m["type"] == "http.response.start"), None)
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.fixture
def superuser(transactional_db: None) -> User:
    return User.objects.create_superuser("operator", "op@example.com", "a-long-operator-password")


@pytest.fixture
def shown_thread(coder: Any) -> Thread:
    return Thread.objects.create(agui_thread_id="t-hops", agent=coder, title="a thread the lists show")


@pytest.mark.parametrize("page", ["admin", "api"])
def test_a_request_of_the_standard_stack_crosses_to_its_thread_once(superuser, shown_thread, page):
    if page == "admin":
        client = Client()
        client.force_login(superuser)
        path, headers = "/admin/threads/thread/", {"Cookie": f"sessionid={client.cookies['sessionid'].value}"}
    else:
        path, headers = "/api/threads/", {"Authorization": f"Token {Token.objects.create(user=superuser).key}"}
    executor = CountingExecutor()
    try:
        loops: list[CountingLoop] = []

        def loop_factory() -> CountingLoop:
            loops.append(CountingLoop())
            return loops[0]

        first_byte: list[int] = []
        status, body = asyncio.run(_get(path, headers, executor, first_byte), loop_factory=loop_factory)
    finally:
        executor.shutdown()
    assert status == 200, body[:300]
    assert b"t-hops" in body or b"a thread the lists show" in body
    # Django's async chain went to the thread and back for every middleware's hook and for the view:
    # 17 times; and request_started's asend once more.
    assert executor.calls <= MOST_CROSSINGS and len(executor.threads) == 1
    loop = loops[0]
    assert loop.returns <= MOST_RETURNS, f"{loop.returns} returns from the request's thread to the loop"
    # The response starts in the turn its hand-over arrives in, or the next: not three turns later,
    # when asgiref's crossing has come back (its future, its shield, the task's wake-up).
    assert loop.first_byte_in is not None and loop.returned_in
    assert loop.first_byte_in - loop.returned_in[0] <= 1, (loop.returned_in, loop.first_byte_in)


@pytest.fixture
def signalled() -> Any:
    """Where Django's request signals reached their receivers: (signal, thread) in order."""
    from django.core import signals

    heard: list[tuple[str, int]] = []

    def started(**kwargs: Any) -> None:
        heard.append(("started", threading.get_ident()))

    def finished(**kwargs: Any) -> None:
        heard.append(("finished", threading.get_ident()))

    signals.request_started.connect(started, dispatch_uid="test-started")
    signals.request_finished.connect(finished, dispatch_uid="test-finished")
    yield heard
    signals.request_started.disconnect(dispatch_uid="test-started")
    signals.request_finished.disconnect(dispatch_uid="test-finished")


@pytest.fixture
def started_threads() -> Any:
    """The threads request_started reached its receivers on, in order: the Thread objects
    themselves, as an ident can be reused once its thread has ended."""
    from django.core import signals

    threads: list[threading.Thread] = []

    def started(**kwargs: Any) -> None:
        threads.append(threading.current_thread())

    signals.request_started.connect(started, dispatch_uid="test-started-threads")
    yield threads
    signals.request_started.disconnect(dispatch_uid="test-started-threads")


def test_request_started_reaches_its_receivers_on_the_requests_thread(superuser, shown_thread, signalled):
    """Django's close_old_connections acts on the connections of the thread it runs on: sent from
    the view's crossing, it must still run on the request's thread, before the view."""
    headers = {"Authorization": f"Token {Token.objects.create(user=superuser).key}"}
    executor = CountingExecutor()
    try:
        status, body = asyncio.run(_get("/api/threads/", headers, executor))
    finally:
        executor.shutdown()
    assert status == 200, body[:300]
    (request_thread,) = executor.threads
    assert signalled == [("started", request_thread), ("finished", request_thread)]


def test_a_request_django_refuses_before_its_view_is_still_started_and_finished(transactional_db, signalled):
    """A query string that is not UTF-8 makes Django's create_request answer 400 with no request
    and no view: request_started is then sent on the loop, so that its receivers see the request
    begin as they see it end."""
    executor = CountingExecutor()
    try:
        status, _ = asyncio.run(_get("/api/threads/", {}, executor, query_string=b"q=\xff"))
    finally:
        executor.shutdown()
    assert status == 400
    assert [name for name, _ in signalled] == ["started", "finished"]


def test_an_agui_request_does_not_cross_to_a_thread_before_its_first_byte(coder):
    """agui/asgi.py AguiHandler runs request_started's receivers on the loop: Django's asend took
    every AG-UI request to a thread and back before its view began (a fifth of a run's TTFB)."""
    executor = CountingExecutor()
    first_byte: list[int] = []

    async def twice() -> tuple[int, bytes]:
        # The first reads the agents and the MCP configuration (on the database thread); the
        # second finds them read, as every request does after the first of a process.
        await _get("/agui/info", {"Authorization": "Bearer test-token"}, executor)
        returns = asyncio.get_running_loop().returns  # type: ignore[attr-defined]
        answer = await _get("/agui/info", {"Authorization": "Bearer test-token"}, executor, first_byte)
        first_byte[-1] -= returns
        return answer

    try:
        status, body = asyncio.run(twice(), loop_factory=CountingLoop)
    finally:
        executor.shutdown()
    assert status == 200 and b'"coder"' in body, body[:300]
    assert first_byte == [0], f"{first_byte[0]} returns from a thread before the first byte"


@pytest.mark.parametrize("title", ["a thread the lists show", 'tags <b>&</b> "quotes"'])
def test_the_lists_checkbox_is_the_one_django_renders(coder, title):
    """threads/admin/display.py ListCheckboxes writes each row's checkbox without the template
    engine; the admin's script selects rows by it, so it must be Django's to the byte."""
    from django.contrib import admin

    from threads.admin import RunAdmin, ThreadAdmin
    from threads.models import Run

    thread = Thread.objects.create(agui_thread_id="t-box", agent=coder, title=title)
    run = Run.objects.create(thread=thread, agui_run_id="r-box")
    for model_admin, obj in ((admin.site._registry[Thread], thread), (admin.site._registry[Run], run)):
        assert isinstance(model_admin, ThreadAdmin | RunAdmin)
        assert model_admin.action_checkbox(obj) == admin.ModelAdmin.action_checkbox(model_admin, obj)


def test_a_client_gone_while_the_view_runs_leaves_no_send_behind(superuser, shown_thread, signalled, caplog):
    """The response is handed to the loop as the view returns (StandardHandler.response_for); when
    the client went away meanwhile, the request is cancelled and that send with it, and the request
    still ends as Django ends one: request_finished after request_started."""
    headers = {"Authorization": f"Token {Token.objects.create(user=superuser).key}"}
    executor = CountingExecutor()

    async def gone() -> set[asyncio.Task[Any]]:
        await _get("/api/threads/", headers, executor, gone_at_once=True)
        await asyncio.sleep(0.05)  # a send begun for it would still be running, or have failed
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            left = asyncio.run(gone())
    finally:
        executor.shutdown()
    assert left == set()
    assert not caplog.records, [record.getMessage() for record in caplog.records]
    assert [name for name, _ in signalled] == ["started", "finished"]


def test_the_standard_stacks_requests_keep_their_threads(superuser, shown_thread, started_threads):
    """project/asgi.py _RequestThreads: asgiref started a new thread for every admin or API request
    (from the event loop, which waited for it to run) and another to join it after the response.
    Requests one after another now run on the threads kept (two at most: a thread comes back to be
    taken again once the give-back it was handed has run there, which may be after the next request
    began), and two at once on two."""
    headers = {"Authorization": f"Token {Token.objects.create(user=superuser).key}"}

    async def requests() -> list[tuple[int | None, bytes]]:
        answers = [await _get("/api/threads/", headers, None) for _ in range(8)]
        return answers + list(await asyncio.gather(*(_get("/api/threads/", headers, None) for _ in range(2))))

    answers = asyncio.run(requests())
    assert [status for status, _ in answers] == [200] * 10, answers
    served = started_threads
    assert len(served) == 10 and all(thread is not threading.main_thread() for thread in served)
    one_after_another, at_once = served[:8], served[8:]
    assert len({id(thread) for thread in one_after_another}) <= 2, one_after_another
    assert at_once[0] is not at_once[1]


def test_a_request_begun_in_an_earlier_requests_context_gets_a_thread_of_its_own(
    superuser, shown_thread, started_threads
):
    """A server may start a connection's next request in a copy of the previous request's context:
    uvicorn's read callback, registered again while a request read its large body, copies that
    request's context, and a pipelined request is started from the previous one's send. That context
    is not an enclosing application's: the next request must not run on the previous one's thread
    (given back to the pool, or still in use), nor fail because asgiref refuses an exited context
    (a logout after a 1 MB admin form got 500: tests/project/test_site_bodies.py)."""
    headers = {"Authorization": f"Token {Token.objects.create(user=superuser).key}"}

    async def requests() -> list[tuple[int | None, bytes]]:
        contexts: list[contextvars.Context] = []
        pipelined: list[asyncio.Task[tuple[int | None, bytes]]] = []

        def pipeline() -> None:  # as the first request's response starts, from its context
            contexts.append(contextvars.copy_context())
            pipelined.append(asyncio.get_running_loop().create_task(_get("/api/threads/", headers, None)))

        first = await _get("/api/threads/", headers, None, on_start=pipeline)
        second = await pipelined[0]
        later = asyncio.get_running_loop().create_task(_get("/api/threads/", headers, None), context=contexts[0])
        return [first, second, await later]

    answers = asyncio.run(requests())
    assert [status for status, _ in answers] == [200] * 3, answers
    first, pipelined, _ = started_threads
    assert pipelined is not first


def test_a_request_thread_comes_back_only_once_its_work_is_done():
    """A request cancelled while its view still runs (its client went away) leaves that work on its
    thread: no other request gets the thread until the work has ended. Idle threads beyond KEEP go."""
    from project.asgi import _RequestThreads

    threads = _RequestThreads()
    first = threads.take()
    release = threading.Event()
    leftover = first.submit(release.wait, 10)
    threads.give_back(first)
    second = threads.take()
    assert second is not first  # the first is still running what its request left
    release.set()
    assert leftover.result(timeout=10)
    first.submit(lambda: None).result(timeout=10)  # after the give-back's own call
    assert threads.take() is first
    threads.give_back(first)
    threads.give_back(second)
    deadline = time.monotonic() + 10
    while len(threads._idle) < 2 and time.monotonic() < deadline:  # both back before the next takes
        time.sleep(0.01)
    assert len(threads._idle) == 2

    many = [threads.take() for _ in range(_RequestThreads.KEEP + 3)]
    for executor in many:
        executor.submit(lambda: None).result(timeout=10)
        threads.give_back(executor)

    def let_go() -> list[ThreadPoolExecutor]:  # shut down: they refuse new work
        refused = []
        for executor in many:
            try:
                executor.submit(lambda: None)
            except RuntimeError:
                refused.append(executor)
        return refused

    deadline = time.monotonic() + 10
    while len(let_go()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(let_go()) == 3
    assert len(threads._idle) == _RequestThreads.KEEP
    assert not set(map(id, let_go())) & set(map(id, threads._idle))
    for executor in many:
        executor.shutdown()
