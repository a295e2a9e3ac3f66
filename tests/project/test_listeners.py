"""Where the server listens: AG-UI on a port of its own (AGUI_PORT), under AGUI_PATH, over TLS.

Real server processes (``manage.py serve``), asked over real sockets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from tests.agui_client import run_client
from tests.certs import self_signed
from tests.procs import ROOT, ServerProcess
from tests.sse import parse_frames


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    return workspace


@pytest.mark.clients
def test_agui_port_serves_only_agui_under_its_path_and_the_main_port_everything_else(tmp_path):
    server = ServerProcess(
        data_dir=tmp_path, workspace=_workspace(tmp_path), agui_port=True, env={"AGUI_PATH": "/copilot/agui"}
    ).start()
    try:
        auth = server.headers
        agui, main = server.agui_url, server.url
        # The AG-UI port: its routes under AGUI_PATH, nothing else.
        info = httpx.get(f"{agui}/copilot/agui/info", headers=auth)
        assert info.status_code == 200
        assert info.json()["path"] == "/copilot/agui"
        assert info.json()["agents"][0]["url"] == f"{agui}/copilot/agui/coder"
        for path in ("/admin/login/", "/api/schema/", "/metrics", "/agui/info", "/copilot/agui"):
            refused = httpx.get(f"{agui}{path}", headers=auth)
            assert refused.status_code == 404, path
            assert refused.json()["error"]["code"] == "not_found"
        # The main port: the admin, the API and the metrics, and no AG-UI at all.
        assert httpx.get(f"{main}/admin/login/").status_code == 200
        assert httpx.get(f"{main}/api/schema/").status_code == 200
        assert httpx.get(f"{main}/metrics", headers=auth).status_code == 200
        assert httpx.get(f"{main}/copilot/agui/info", headers=auth).status_code == 404
        body = {"threadId": "t-main", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hi"}]}
        posted = httpx.post(f"{main}/copilot/agui/coder", content=orjson.dumps(body), headers=auth)
        assert posted.status_code == 404 and posted.json()["error"]["code"] == "not_found"
        # A whole run through the official client, on the AG-UI port.
        (result,) = run_client(
            "1",
            f"{agui}/copilot/agui/coder",
            server.token,
            [{"threadId": "t-port", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "hello"}]}],
        )
        assert result["error"] is None, result["error"]
        assert result["received"][-1]["type"] == "RUN_FINISHED"
        # Its reattach route is there too; the main port's is not.
        follow = "/copilot/agui/coder/threads/t-port/events"
        assert httpx.get(f"{agui}{follow}", headers=auth).status_code == 200
        assert httpx.get(f"{main}{follow}", headers=auth).status_code == 404
    finally:
        server.kill()


def test_tls_serves_https_with_the_given_certificate(tmp_path):
    cert, key = self_signed(tmp_path)
    server = ServerProcess(data_dir=tmp_path, workspace=_workspace(tmp_path), tls=(cert, key)).start()
    try:
        assert server.url.startswith("https://")
        body = {
            "threadId": "t-tls",
            "runId": "r1",
            "protocolVersion": "1.0",
            "messages": [{"id": "u1", "role": "user", "content": "hello"}],
        }
        response = httpx.post(
            f"{server.url}/agui/coder",
            content=orjson.dumps(body),
            headers={**server.headers, "Content-Type": "application/json"},
            verify=server.verify,
            timeout=30,
        )
        frames, _ = parse_frames(response.content)
        assert [f.event["type"] for f in frames][:1] == ["RUN_STARTED"]
        assert frames[-1].event["type"] == "RUN_FINISHED"
        # The certificate is the one it was given: a client that does not trust it is refused.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{server.url}/agui/info", headers=server.headers)
        # And plain HTTP is not spoken on that port.
        with pytest.raises(httpx.HTTPError):
            httpx.get(server.url.replace("https://", "http://") + "/agui/info", headers=server.headers)
    finally:
        server.kill()


@pytest.mark.parametrize(("given", "missing"), [("TLS_CERT_FILE", "TLS_KEY_FILE"), ("TLS_KEY_FILE", "TLS_CERT_FILE")])
def test_one_tls_file_alone_stops_start_up_naming_the_other(tmp_path, given, missing):
    cert, key = self_signed(tmp_path)
    unset = ("DJANGO_SETTINGS_MODULE", "TLS_CERT_FILE", "TLS_KEY_FILE")
    environ = {k: v for k, v in os.environ.items() if k not in unset}
    environ.update({"THREADLINE_DATA_DIR": str(tmp_path), given: str(cert if given == "TLS_CERT_FILE" else key)})
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and f"{missing} is not set" in result.stderr
