"""Real tools through bash's proxy (issue #47), as root from the agent's bash in bwrap: ``pip install``
of a package from a package index served here, and ``git clone`` over HTTPS from a git server served
here. Each host is unlisted at first: the proxy refuses it, the agent asks with
request_network_access, the person approves, and the same command works.

Both servers listen on 127.0.0.2, which the operator lets past the address checks
(AGENT_BASH_ALLOWED_PRIVATE_HOSTS); nothing lists them as allowed."""

from __future__ import annotations

import functools
import http.server
import shutil
import ssl
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.certs import TLSServer
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.network import HOST, YES, YES_ALWAYS, answered_chat, tool_results
from tests.network import allowlist as bash_allowlist

pytestmark = [
    pytest.mark.clients,
    pytest.mark.skipif(
        shutil.which("bwrap") is None or shutil.which("git") is None or shutil.which("openssl") is None,
        reason="needs bwrap, git and openssl",
    ),
]
WHEEL = "tinypkg-1.0-py3-none-any.whl"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    """Serves a directory on 127.0.0.2 (plain HTTP, or HTTPS with ``tls=True``); yields a function
    that starts one and returns its port."""
    servers: list[TLSServer] = []

    def serve(root: Path, tls: bool = False) -> int:
        server = TLSServer((HOST, 0), functools.partial(_Quiet, directory=str(root)))
        if tls:
            server.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server.tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def allowlist(workspace: Path) -> Iterator[None]:
    with bash_allowlist():
        yield


def _index(root: Path) -> None:
    """A package index (the simple API) holding one pure-Python wheel."""
    files = root / "files"
    files.mkdir(parents=True)
    with zipfile.ZipFile(files / WHEEL, "w") as wheel:
        wheel.writestr("tinypkg/__init__.py", "VALUE = 'installed through the proxy'\n")
        wheel.writestr("tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        wheel.writestr(
            "tinypkg-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: threadline-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(
            "tinypkg-1.0.dist-info/RECORD",
            "tinypkg/__init__.py,,\ntinypkg-1.0.dist-info/METADATA,,\ntinypkg-1.0.dist-info/WHEEL,,\n"
            "tinypkg-1.0.dist-info/RECORD,,\n",
        )
    project = root / "simple" / "tinypkg"
    project.mkdir(parents=True)
    (project / "index.html").write_text(f'<html><body><a href="/files/{WHEEL}">{WHEEL}</a></body></html>\n')


def _certificate(tmp_path: Path) -> Path:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=threadline-test"),
            *("-addext", f"subjectAltName=IP:{HOST}", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert


def _repository(root: Path) -> None:
    """A bare repository served over git's HTTP protocol (the static "dumb" one, over HTTPS)."""
    source = root.parent / "source"
    source.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(source)], check=True)
    (source / "hello.txt").write_text("cloned through the proxy\n")
    subprocess.run([*git, "-C", str(source), "add", "."], check=True)
    subprocess.run([*git, "-C", str(source), "commit", "-qm", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(root / "repo.git")], check=True)
    subprocess.run(["git", "-C", str(root / "repo.git"), "update-server-info"], check=True)


def _asked_then_approved(server: Any, fake_api: Any, thread_id: str, command: str, port: int) -> dict[str, str]:
    call = {"command": command, "timeout_seconds": 120}
    fake_api.script(
        [
            tool_turn("bash", call, id="toolu_first"),
            tool_turn(
                "request_network_access", {"host": HOST, "port": port, "reason": "the task needs it"}, id="toolu_ask"
            ),
            tool_turn("bash", call, id="toolu_again"),
            text_turn(["Done."]),
        ]
    )
    # bash asks (a change): "always" for this command, so its retry runs unasked; the host: "yes".
    return tool_results(answered_chat(server, "1", thread_id, YES_ALWAYS, YES))


def test_pip_installs_from_an_index_once_its_host_is_approved(server, fake_api, allowlist, served, tmp_path, workspace):
    _index(tmp_path / "index")
    port = served(tmp_path / "index")
    command = (
        f"python3 -m pip install --disable-pip-version-check --no-input --index-url http://{HOST}:{port}/simple/ "
        f"--trusted-host {HOST} --target deps tinypkg 2>&1 | tail -5; "
        "PYTHONPATH=deps python3 -c 'import tinypkg; print(tinypkg.VALUE)'"
    )
    outputs = _asked_then_approved(server, fake_api, "t-net-pip", command, port)
    assert "request_network_access" in outputs["toolu_first"], outputs["toolu_first"]
    assert "installed through the proxy" not in outputs["toolu_first"]
    assert "granted" in outputs["toolu_ask"], outputs["toolu_ask"]
    assert "installed through the proxy" in outputs["toolu_again"], outputs["toolu_again"]
    assert (workspace / "deps" / "tinypkg" / "__init__.py").is_file()


def test_git_clones_over_https_once_its_host_is_approved(server, fake_api, allowlist, served, tmp_path, workspace):
    cert = _certificate(tmp_path)
    shutil.copy(cert, workspace / "cert.pem")
    (tmp_path / "git").mkdir()
    _repository(tmp_path / "git")
    port = served(tmp_path / "git", tls=True)
    command = (
        f"git -c http.sslCAInfo=cert.pem clone -q https://{HOST}:{port}/repo.git cloned 2>&1; cat cloned/hello.txt"
    )
    outputs = _asked_then_approved(server, fake_api, "t-net-git", command, port)
    assert "request_network_access" in outputs["toolu_first"] or "403" in outputs["toolu_first"], outputs["toolu_first"]
    assert "granted" in outputs["toolu_ask"], outputs["toolu_ask"]
    assert "cloned through the proxy" in outputs["toolu_again"], outputs["toolu_again"]
    assert (workspace / "cloned" / "hello.txt").read_text() == "cloned through the proxy\n"
