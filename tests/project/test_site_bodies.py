"""The admin and the REST API read a body only from a sender known by the headers (an API token, a
logged-in session); a stranger may send a login form's worth (16 KiB) and is refused at once past it,
before the body is read. The memory test at the end is on a real server process."""

from __future__ import annotations

import contextlib
import socket
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import orjson
import pytest
from django.contrib.auth.models import User

from tests import api_world as world
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.procs import ServerProcess
from tests.sse import post_run
from threads.models import Approval

GIB = 1 << 30  # declared, never sent
CAP = 8 * 1024 * 1024  # the default cap on a known sender's body
SMALL = 16 * 1024  # a stranger's
PASSWORD = "a-long-operator-password"


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


def _head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it answered and closed already
        sock.sendall(data)


def _answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (the socket's timeout fails the test if
    it waits for the rest of the body instead)."""
    received = b""
    try:
        while data := sock.recv(65536):
            received += data
    except ConnectionResetError:
        pass  # closed with part of our body unread: a reset is a close too
    return received


@pytest.mark.parametrize(
    ("path", "status"),
    [("/api/approvals/x/answer", b"401"), ("/admin/login/", b"413"), ("/admin/agents/agent/add/", b"413")],
)
def test_a_strangers_large_body_is_refused_before_it_is_read(server, path, status):
    with _connect(server.url) as sock:
        sock.sendall(_head(path, {"Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(GIB)}))
        _send_quietly(sock, b"a=" + b"x" * 131072)  # and never the rest
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert b"connection: close" in answer.lower()
    head, _, body = answer.partition(b"\r\n\r\n")
    error = orjson.loads(body)["error"]
    if status == b"401":
        assert b"www-authenticate: token" in head.lower()
        assert "Authorization: Token" in error["message"]
    else:
        assert error == {
            "code": "body_too_large",
            "message": "a request from someone not logged in may carry a body of at most 16384 bytes; log in first",
        }


def test_a_wrong_token_or_a_forged_session_is_a_stranger(server):
    for credentials in ({"Authorization": "Token not-a-token"}, {"Cookie": "sessionid=forged0123456789abcdefghijkl"}):
        with _connect(server.url) as sock:
            sock.sendall(_head("/admin/login/", {**credentials, "Content-Length": str(CAP)}))
            _send_quietly(sock, b"x" * 131072)
            assert _answer(sock).startswith(b"HTTP/1.1 413")


def test_a_strangers_chunked_body_is_cut_past_the_small_cap(server):
    with _connect(server.url) as sock:
        sock.sendall(_head("/api/approvals/x/answer", {"Transfer-Encoding": "chunked"}))
        chunk = b" " * 4096
        _send_quietly(sock, b"%x\r\n%s\r\n" % (len(chunk), chunk) * (SMALL // len(chunk) + 2))  # no last chunk
        assert _answer(sock).startswith(b"HTTP/1.1 401")


def test_a_strangers_small_body_reaches_django(server):
    """Under the small cap the body is read, and Django answers as it always has: the API's own 401."""
    response = httpx.post(f"{server.url}/api/approvals/x/answer", json={"approved": True}, timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response.headers.get("connection", "") != "close"


class _Form(HTMLParser):
    """The fields of the admin's change form, as a browser would submit it unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, str] = {}
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "input" and a.get("name") and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") != "checkbox" or "checked" in a:
                # A browser sends "on" for a checked box without a value, and "" for an empty field.
                self.fields[a["name"]] = a.get("value", "on" if a.get("type") == "checkbox" else "")
        elif tag == "textarea":
            self._textarea = a["name"]
            self.fields[a["name"]] = ""
        elif tag == "select":
            self._select = a["name"]
        elif tag == "option" and self._select and "selected" in a:
            self.fields[self._select] = a.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            self.fields[self._textarea] += data.removeprefix("\n")


def _form(html: str) -> dict[str, str]:
    parser = _Form()
    parser.feed(html)
    return parser.fields


def _logged_in(url: str) -> httpx.Client:
    """A browser's session: the login form, a stranger's one body, posted with its CSRF token."""
    client = httpx.Client(base_url=url, timeout=30)
    login = _form(client.get("/admin/login/").text)
    login.update(username="operator", password=PASSWORD)
    answer = client.post("/admin/login/?next=/admin/", data=login)
    assert answer.status_code == 302 and answer.headers["location"] == "/admin/", answer.text[:500]
    return client


def test_a_logged_in_session_sends_a_large_form_and_a_stranger_its_login(server, coder):
    User.objects.create_superuser("operator", "op@example.com", PASSWORD)
    prompt = "Be brief. " * 100_000  # 1 MB: far past a stranger's cap, well under the cap
    with contextlib.closing(_logged_in(server.url)) as admin:
        page = f"/admin/agents/agent/{coder.pk}/change/"
        form = _form(admin.get(page).text)
        form["system_prompt"] = prompt
        saved = admin.post(page, data=form)
        assert saved.status_code == 302, saved.text[:2000]
        logout = admin.post("/admin/logout/", data={"csrfmiddlewaretoken": admin.cookies["csrftoken"]})
        assert logout.status_code == 200
        # The same session, logged out: a stranger again. Its 1 MB form is refused from the headers;
        # only they are sent, since a body cut off unread can reset the connection before the
        # client reads the answer.
        body = urlencode(form).encode()
        cookie = "; ".join(f"{name}={value}" for name, value in admin.cookies.items())
        headers = {
            "Cookie": cookie,
            "Content-Type": "application/x-www-form-urlencoded",
            "Content-Length": str(len(body)),
        }
        with contextlib.closing(_connect(server.url)) as sock:
            sock.sendall(_head(page, headers))
            refused = _answer(sock)
        assert refused.startswith(b"HTTP/1.1 413"), refused[:200]
    coder.refresh_from_db()
    assert coder.system_prompt == prompt.strip()


def test_a_token_holders_large_body_is_read(server, fake_api, workspace):
    owner = world.person("olive")
    key = owner.api._credentials["HTTP_AUTHORIZATION"].removeprefix("Token ")
    fake_api.script([tool_turn("file_write", {"path": "n.txt", "content": "x"}, id="toolu_big"), text_turn(["No."])])
    asked = post_run(server.url, "coder", v1(run_input("t-large", "r1", user("note it"))), token=key)
    interrupt = asked.events[-1]["outcome"]["interrupts"][0]["id"]
    body = b'{"approved": false, "reason": "not today"}' + b" " * (4 * 1024 * 1024)  # JSON allows it
    response = httpx.post(
        f"{server.url}/api/approvals/{interrupt}/answer",
        content=body,
        headers={"Authorization": f"Token {key}", "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    assert Approval.objects.get(pk=interrupt).reason == "not today"
    server.drain()


# A real server process: its memory is its own, measured from outside.

CONNECTIONS = 100
BODY = 8 * 1024 * 1024 - 4096  # under the cap: a known sender's would be read


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_hundred_strangers_bodies_do_not_grow_the_servers_memory(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "ws").mkdir()
    proc = ServerProcess(data_dir=tmp_path / "data", workspace=tmp_path / "ws").start()
    held: list[socket.socket] = []
    try:
        assert proc.proc is not None
        for path in ("/api/agents/", "/admin/login/"):  # the first request of each imports what it needs
            httpx.get(f"{proc.url}{path}", timeout=30)
        httpx.post(f"{proc.url}/api/approvals/x/answer", json={"approved": True}, timeout=30)
        before = _rss(proc.proc.pid)
        paths = ["/api/approvals/x/answer", "/admin/login/", "/admin/agents/agent/add/"]
        chunk = b"x" * (1024 * 1024)
        for n in range(CONNECTIONS):
            sock = _connect(proc.url)
            held.append(sock)
            sock.sendall(_head(paths[n % len(paths)], {"Content-Length": str(BODY)}))
            sock.settimeout(0.5)
            # All of the body but its last bytes, so a server that reads it holds it and waits for the rest.
            for _ in range(BODY // len(chunk)):
                try:
                    sock.sendall(chunk)
                except (BrokenPipeError, ConnectionResetError, TimeoutError):
                    break  # refused and closed, or the server reads nothing more: either way, on
        grown = _rss(proc.proc.pid) - before
        # Without the gate each held body was read into memory: about 800 MB.
        assert grown < 64 * 1024 * 1024, f"the server grew by {grown / 2**20:.0f} MiB"
        for sock in held:  # each answered although its body never came whole
            sock.settimeout(30)
            answer = _answer(sock)
            assert answer[9:12] in (b"401", b"413"), answer[:100]
    finally:
        for sock in held:
            sock.close()
        proc.kill()
