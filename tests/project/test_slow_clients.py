"""Slow and idle clients are dropped by the real server process (``manage.py serve``): a request
trickled past SERVER_REQUEST_TIMEOUT_SECONDS, an idle keep-alive connection, and connections past
SERVER_MAX_CONNECTIONS; the open-file limit is raised at start-up. ``manage.py runserver`` (daphne)
still serves a run."""

from __future__ import annotations

import resource
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.helpers import run_input, user, v1
from tests.procs import ROOT, ServerProcess, free_port
from tests.sse import post_run

LIMIT = 12


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module (a server start costs seconds); each test leaves it serving."""
    tmp_path = tmp_path_factory.mktemp("guarded")
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    env = {
        "SERVER_REQUEST_TIMEOUT_SECONDS": "1",
        "SERVER_KEEP_ALIVE_SECONDS": "1",
        "SERVER_MAX_CONNECTIONS": str(LIMIT),
        # These tests hold the server's whole cap from one client (a client's own cap:
        # tests/project/test_client_connection_cap.py).
        "SERVER_MAX_CONNECTIONS_PER_CLIENT": str(LIMIT),
    }
    proc = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws", env=env).start()
    yield proc
    proc.kill()


def _open(proc: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proc.port), timeout=30)


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's 30 s timeout
    fails the test if it never does)."""
    received = b""
    try:
        while data := sock.recv(65536):
            received += data
    except ConnectionResetError:
        pass
    return received


def test_connections_trickling_their_headers_are_dropped_and_the_server_serves_again(guarded):
    slow = [_open(guarded) for _ in range(LIMIT)]
    try:
        for sock in slow:
            sock.sendall(b"GET /agui/info HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the end of the headers
        # While they are held, the server is at its connection cap: a newcomer is told so, not hung.
        busy = httpx.get(f"{guarded.url}/agui/info", headers=guarded.headers, timeout=30)
        assert busy.status_code == 503
        for sock in slow:
            answer = _read_until_closed(sock)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:100]
    finally:
        for sock in slow:
            sock.close()
    assert httpx.get(f"{guarded.url}/agui/info", headers=guarded.headers, timeout=30).status_code == 200
    assert "did not arrive within the time limit" in guarded.log.read_text()


def test_a_body_trickled_a_byte_at_a_time_is_dropped(guarded):
    body = orjson.dumps(v1(run_input("t-slow", "r1", user("hi"))))
    head = (
        f"POST /agui/coder HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {guarded.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with _open(guarded) as sock:
        sock.sendall(head)
        sock.settimeout(0.2)
        closed = b""
        for byte in body[:-1]:  # one byte every 0.2 s: far slower than the limit allows
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            try:
                closed = sock.recv(65536)
                break  # the server answered (408) or closed
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
        else:
            pytest.fail("the server read the whole trickled body")
        sock.settimeout(30)
        closed += _read_until_closed(sock)
        assert closed == b"" or closed.startswith(b"HTTP/1.1 408"), closed[:100]
    assert httpx.get(f"{guarded.url}/agui/info", headers=guarded.headers, timeout=30).status_code == 200


def test_an_idle_keep_alive_connection_is_closed(guarded):
    with _open(guarded) as sock:
        request = f"GET /agui/info HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {guarded.token}\r\n\r\n"
        sock.sendall(request.encode())
        answer = _read_until_closed(sock)  # the answer, then the close once it has idled
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]


def test_a_stream_open_longer_than_the_request_limit_is_not_cut(guarded):
    """The limit is on reading the request, not on the response: an SSE stream outlives it."""
    body = v1(run_input("t-long", "r1", user("hi")))
    stream = post_run(guarded.url, "coder", body, token=guarded.token)
    assert stream.types[-1] == "RUN_FINISHED"
    with httpx.stream(
        "GET", f"{guarded.url}/agui/coder/threads/t-long/events", headers=guarded.headers, timeout=30
    ) as follow:
        assert follow.status_code == 200
        assert b"RUN_FINISHED" in follow.read()


def _serve_with_file_limit(
    guarded: ServerProcess, tmp_path: Path, soft: int, hard: int, connections: int | None, listening: bool = False
) -> str:
    """Starts a second server on the guarded one's (migrated) database under the given file limit
    (with SERVER_MAX_CONNECTIONS unset when ``connections`` is None), and returns its log once it has
    started; with ``listening``, followed by what ``ss`` says of its listening socket."""
    port = free_port()
    env = {key: value for key, value in guarded.env.items() if key != "SERVER_MAX_CONNECTIONS"}
    env["PORT"] = str(port)
    if connections is not None:
        env["SERVER_MAX_CONNECTIONS"] = str(connections)
    log_path = tmp_path / "server.log"

    def lower_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    with open(log_path, "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lower_limit,
        )
    try:
        for _ in range(600):
            if "Uvicorn running" in log_path.read_text() or server.poll() is not None:
                break
            time.sleep(0.1)
        log = log_path.read_text()
        if listening:  # "Uvicorn running" is logged on binding the socket, before listening on it
            for _ in range(600):
                socket_line = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
                if socket_line.strip():
                    return log + socket_line
                time.sleep(0.1)
        return log
    finally:
        server.kill()
        server.wait(10)


def test_start_up_raises_the_open_file_limit_to_the_hard_limit(guarded, tmp_path):
    log = _serve_with_file_limit(guarded, tmp_path, 256, 4096, connections=100)
    assert "open file limit raised from 256 to 4096 (the hard limit)" in log
    assert "  Connections:    cap 100 (open-file limit 4096; SERVER_MAX_CONNECTIONS), per process" in log
    assert "below the" not in log


def test_by_default_the_connection_cap_is_what_the_open_file_limit_leaves_and_the_backlog_follows(guarded, tmp_path):
    if not shutil.which("ss"):
        pytest.skip("no ss (iproute2) to read the listening socket's backlog")
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    log = _serve_with_file_limit(guarded, tmp_path, 256, 3000, connections=None, listening=True)
    line = "  Connections:    cap 2744 (open-file limit 3000; less 256 for the process's own files), per process"
    assert line in log
    assert "below the" not in log
    # ss shows a listening socket's backlog as its Send-Q: the cap, within the kernel's somaxconn.
    state, _queued, backlog, *_ = log.splitlines()[-1].split()
    assert (state, int(backlog)) == ("LISTEN", min(2744, somaxconn))


def test_start_up_warns_when_the_file_limit_is_too_low_for_the_connection_cap(guarded, tmp_path):
    log = _serve_with_file_limit(guarded, tmp_path, 512, 512, connections=2000)
    assert "the open-file limit is 512, below the 2256 that SERVER_MAX_CONNECTIONS=2000 needs" in log


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SERVER_KEEP_ALIVE_SECONDS", "soon"),
        ("SERVER_KEEP_ALIVE_SECONDS", "0"),
        ("SERVER_REQUEST_TIMEOUT_SECONDS", "inf"),
        ("SERVER_REQUEST_TIMEOUT_SECONDS", "-1"),
        ("SERVER_MAX_CONNECTIONS", "0"),
        ("SERVER_MAX_CONNECTIONS", "many"),
    ],
)
def test_a_bad_slow_client_setting_stops_start_up_naming_it(tmp_path, name, value):
    proc = ServerProcess(data_dir=tmp_path, workspace=tmp_path, env={name: value})
    result = proc.manage("check")
    assert result.returncode != 0
    assert name in result.stderr


def test_runserver_with_daphne_still_serves_a_run(guarded):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(guarded.log, "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=ROOT,
            env=guarded.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/agui/info", headers=guarded.headers, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        stream = post_run(url, "coder", v1(run_input("t-daphne", "r1", user("hi"))), token=guarded.token)
        assert stream.types[0] == "RUN_STARTED"
        assert stream.types[-1] == "RUN_FINISHED"
        unauthorised = httpx.post(f"{url}/agui/coder", content=b"{}", timeout=10)
        assert unauthorised.status_code == 401
    finally:
        server.kill()
        server.wait(10)
