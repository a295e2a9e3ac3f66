"""A server process loads only what its requests use: the AG-UI path on the demo model needs
neither the anthropic SDK, nor the REST API and admin, nor daphne's Twisted, nor the web
tools' httpx and BeautifulSoup (issue #14). The process ``make run`` starts (manage.py serve),
after a first reply on the SDK path, has not loaded the REST API, the MCP SDK or what its checks
import, and weighs little more than a plain Django view with the SDK (issue #27, item 6)."""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.asgi_scripts import ASGI_POST, _env
from tests.procs import ROOT, ServerProcess, free_port, script_report

# Serves one AG-UI run and an unknown AG-UI path through project.asgi in this process, then
# prints which heavy packages it has imported.
SCRIPT = """
import asyncio, json, sys

from project.asgi import application

async def call(method, path, body=b""):
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"authorization", b"Bearer lean"), (b"content-type", b"application/json")],
             "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}
    sent, done = [], asyncio.Event()
    async def receive():
        if not sent and not done.is_set():
            sent.append(0)
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}
    out = []
    async def send(message):
        out.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            done.set()
    await application(scope, receive, send)
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])

async def main():
    body = json.dumps({"threadId": "t1", "runId": "r1", "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                       "tools": [], "context": [], "state": {}, "forwardedProps": {}}).encode()
    status, stream = await call("POST", "/agui/coder", body)
    assert status == 200 and b"RUN_FINISHED" in stream, stream[-300:]
    status, missing = await call("GET", "/agui/coder/nothing/here")
    from runhost.host import HOST
    await HOST.drain()
    heavy = ("anthropic", "rest_framework.views", "drf_spectacular.views", "threads.api_urls", "twisted")
    heavy += ("httpx", "bs4")
    loaded = [name for name in heavy if name in sys.modules]
    print(json.dumps({"loaded": loaded, "missing": [status, missing.decode()]}))

asyncio.run(main())
"""


def test_the_agui_path_on_the_demo_model_loads_no_sdk_rest_api_or_twisted(tmp_path):
    report = script_report(SCRIPT, _env(tmp_path))
    assert report["loaded"] == []
    status, body = report["missing"]
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"


def test_runserver_still_serves_with_daphne(tmp_path):
    env = _env(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        for _ in range(300):
            try:
                response = httpx.get(
                    f"http://127.0.0.1:{port}/agui/info", headers={"Authorization": "Bearer lean"}, timeout=1
                )
                break
            except httpx.HTTPError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                subprocess.run(["sleep", "0.1"])
        assert response.status_code == 200
        assert response.json()["server"] == "threadline"
    finally:
        server.terminate()
        output = server.communicate(timeout=20)[0].decode()
    assert "Daphne" in output


def test_the_application_freezes_its_code_out_of_the_collectors_walks(tmp_path):
    script = "import gc, json; import project.asgi; print(json.dumps([gc.get_freeze_count(), gc.get_threshold()]))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    frozen, thresholds = json.loads(done.stdout.strip().splitlines()[-1])
    from project.gctune import THRESHOLDS

    assert frozen > 10_000  # Django and the apps, at least
    assert tuple(thresholds) == THRESHOLDS


def test_the_application_lets_a_thread_waiting_for_the_gil_have_it_within_a_millisecond(tmp_path):
    script = "import sys; import project.asgi; print(sys.getswitchinterval())"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip().splitlines()[-1]) == 0.001  # CPython's default: 0.005


# What the scripts below share: a run's POST to /agui/coder through project.asgi in this process
# (the body asks the demo model what is in the project), and a receive that gives the body, then
# says the client has gone once ``gone`` is set.

# One run with the cyclic collector off: once the run is recorded and its response has ended,
# reference counting alone must free its stream (and with it every frame).
FREED_SCRIPT = (
    ASGI_POST
    + """
import gc, weakref

from runhost.host import HOST

async def main():
    gc.disable()
    ended, seen = asyncio.Event(), []
    async def send(message):
        if message["type"] == "http.response.body" and not seen and HOST.registry.streams():
            seen.append(weakref.ref(HOST.registry.streams()[0]))
        if message["type"] == "http.response.body" and not message.get("more_body"):
            ended.set()
    await application(post_scope(b"lean"), receiver(ended), send)
    await HOST.drain()
    await asyncio.sleep(0.1)  # the request's last callbacks
    print(json.dumps({"watched": bool(seen), "freed": bool(seen) and seen[0]() is None}))

asyncio.run(main())
"""
)


def test_a_finished_run_is_freed_at_once_not_left_to_the_cyclic_collector(tmp_path):
    # The collector runs its full passes rarely (project/gctune.py): a run kept alive by a reference
    # cycle held its stream's frames, about 340 KiB for 2,000 tokens, until one came.
    assert script_report(FREED_SCRIPT, _env(tmp_path)) == {"watched": True, "freed": True}


# The operators' requests, made through project.asgi with the cyclic collector off: what each
# leaves in reference cycles (which only the collector frees, stopping the event loop meanwhile).
CYCLES_SCRIPT = (
    ASGI_POST
    + """
import gc
from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.authtoken.models import Token
from agents.models import Agent
from threads.models import Thread

def get_scope(path, headers):
    return {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(), "query_string": b"",
            "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1),
            "headers": headers}

async def get(path, headers):
    ended, status = asyncio.Event(), []
    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif not message.get("more_body"):
            ended.set()
    await application(get_scope(path, headers), receiver(ended), send)
    return status[0]

def operator():
    agent = Agent.objects.get_or_create(name="coder", defaults={"system_prompt": "x"})[0]
    Thread.objects.bulk_create(Thread(agui_thread_id=f"t-{i}", agent=agent) for i in range(30))
    user = get_user_model().objects.create_superuser("op", "op@example.invalid", "pw")
    client = Client()
    assert client.login(username="op", password="pw")
    return client.cookies["sessionid"].value, Token.objects.create(user=user).key

async def main():
    session, token = await sync_to_async(operator)()
    requests = {
        "agui-info": ("/agui/info", [(b"authorization", b"Bearer lean")]),
        "admin": ("/admin/threads/thread/", [(b"cookie", f"sessionid={session}".encode())]),
        "api": ("/api/threads/", [(b"authorization", f"Token {token}".encode())]),
    }
    left = {}
    for name, (path, headers) in requests.items():
        assert await get(path, headers) == 200
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        for _ in range(5):
            await get(path, headers)
        gc.collect()
        left[name] = {"objects": len(gc.garbage), "rows": sum(isinstance(o, Thread) for o in gc.garbage)}
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    print(json.dumps(left))

asyncio.run(main())
"""
)


def test_the_operators_requests_leave_their_rows_to_no_reference_cycle(tmp_path):
    left = script_report(CYCLES_SCRIPT, _env(tmp_path))
    # The AG-UI handler ends a request without raising (agui/acyclic.py AcyclicHandler): nothing at all.
    assert left["agui-info"] == {"objects": 0, "rows": 0}
    # The admin's template context and DRF's serializers are cycles of their own, but no longer hold
    # the page's rows (threads/admin/rows.py AppList, threads/api_query.py ListView).
    assert left["admin"]["rows"] == 0
    assert left["api"]["rows"] == 0


# --------------------------------------------------------------------------- make run's process


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _recorded(db: Path, run_id: str) -> None:
    """Until the server has recorded the run as finished (its event log written)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        for _ in range(300):
            row = conn.execute("SELECT status FROM threads_run WHERE agui_run_id = ?", (run_id,)).fetchone()
            if row is not None and row[0] != "running":
                assert row[0] == "succeeded"
                return
            time.sleep(0.05)
    raise AssertionError(f"run {run_id} was not recorded")


def _sdk_floor_rss(tmp_path: Path) -> float:
    """RSS (MiB) after its first reply of the SDK floor that make bench measures: the plain Django
    view with the anthropic SDK imported and a client made (bench/servers.py, BENCH_SDK_FLOOR)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    env = {k: v for k, v in _env(tmp_path).items() if not k.startswith("BENCH_")}
    floor = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "servers.py"), "django", "--fd", str(sock.fileno())],
        cwd=ROOT,
        env=env | {"BENCH_SDK_FLOOR": "1", "BENCH_TMP": str(tmp_path)},
        pass_fds=(sock.fileno(),),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sock.close()
    try:
        # The listening socket queues the request until the view is up.
        reply = httpx.post(f"http://127.0.0.1:{port}/stream?n=10", timeout=60)
        assert reply.status_code == 200 and b"TEXT_MESSAGE_CONTENT" in reply.content
        return _rss_mib(floor.pid)
    finally:
        floor.terminate()
        floor.wait(20)


@pytest.fixture(scope="module")
def first_reply(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """manage.py serve on the SDK path (FakeAnthropic at the network edge) after its first reply: the
    modules it has imported (PYTHONPROFILEIMPORTTIME logs each one, as -X importtime does), its RSS,
    and the SDK floor's."""
    from tests.fakes.anthropic_api import FakeAnthropic, text_turn

    tmp_path = tmp_path_factory.mktemp("make-run")
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    with FakeAnthropic() as fake:
        fake.add_turn(text_turn("hello from the model"))
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, "PYTHONPROFILEIMPORTTIME": "1"}
        server = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env)
        try:
            server.start()
            body = {
                "threadId": "t1",
                "runId": "r1",
                "messages": [{"id": "m1", "role": "user", "content": "hi"}],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
            }
            reply = httpx.post(f"{server.agui_url}/agui/coder", json=body, headers=server.headers, timeout=60)
            assert reply.status_code == 200 and b"hello from the model" in reply.content
            assert b"RUN_FINISHED" in reply.content
            _recorded(tmp_path / "data" / "threadline.sqlite3", "r1")
            assert server.proc is not None
            rss = _rss_mib(server.proc.pid)
            log = server.log.read_text()
        finally:
            server.stop()
    imported = {line.split("|")[-1].strip() for line in log.splitlines() if line.startswith("import time:")}
    yield {"imported": imported, "rss": rss, "floor": _sdk_floor_rss(tmp_path)}


def test_make_runs_process_streams_on_the_sdk_path_without_the_api_mcp_or_what_the_checks_load(first_reply):
    imported = first_reply["imported"]
    assert "anthropic" in imported and "orchestrator.providers.anthropic" in imported  # the SDK path was taken
    lazy = {
        "threads.api_urls",  # the REST API, loaded by the first path under /api/
        "rest_framework.views",
        "drf_spectacular.views",
        "psycopg",  # DRF's template tags import it (the template checks); on SQLite nothing else does
        "pygments",
        "mcp",  # the MCP SDK, loaded when the first MCP server starts
        "starlette",
        "cryptography",
        "re2",  # grep's, loaded by the first grep
        "twisted",
    }
    assert lazy & imported == set()


def test_make_runs_process_weighs_little_more_than_the_sdk_floor(first_reply):
    # make bench holds this to 1.25x; here a generous margin (it was 1.69x), so that only a heavy
    # module loaded again at start-up, not the machine, fails it.
    assert first_reply["rss"] <= 1.4 * first_reply["floor"], first_reply


def test_make_runs_process_still_refuses_to_start_when_a_system_check_fails(tmp_path):
    # serve runs the checks in a child process (they import the whole site): their verdict still holds.
    (tmp_path / "ws").mkdir()
    env = {"DJANGO_SETTINGS_MODULE": "tests.project.failing_check_settings"}
    server = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env)
    done = subprocess.run(
        [sys.executable, "manage.py", "serve"], cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "urls.E008" in done.stderr and "Uvicorn running" not in done.stdout + done.stderr
