"""Threadline as a real server process (``manage.py serve``), for restart and multi-service tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def postgres_env(postgres_url: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh interpreter on the PostgreSQL database ``postgres_url``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DJANGO_"))}
    return env | {
        "DATABASE_URL": postgres_url,
        "THREADLINE_DATA_DIR": str(tmp_path),
        "AGENT_WORKSPACE": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "LOG_LEVEL": "WARNING",
    }


def script_report(script: str, env: dict[str, str], *, stdin: str | None = None) -> Any:
    """Migrates the database ``env`` names, runs ``script`` in a fresh interpreter, and returns the
    JSON of the last line it prints."""
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert migrated.returncode == 0, migrated.stderr
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _workspaces_root(data_dir: Path, workspace: Path) -> Path:
    """Processes given one workspace share one root for their users' and threads' workspaces,
    beside the workspace, and never inside the data dir (start-up refuses that)."""
    root = workspace.parent / f"{workspace.name}-workspaces"
    if root.resolve().is_relative_to(data_dir.resolve()):
        root = data_dir.parent / f"{data_dir.name}-{workspace.name}-workspaces"
    return root


class ServerProcess:
    def __init__(
        self,
        *,
        data_dir: Path,
        workspace: Path,
        env: dict[str, str] | None = None,
        agui_port: bool = False,
        tls: tuple[Path, Path] | None = None,
        serve_args: tuple[str, ...] = (),
    ) -> None:
        """``agui_port``: AG-UI on a listener of its own (``agui_url``); ``tls``: (certificate, key);
        ``serve_args``: more arguments of ``manage.py serve`` (``--workers 2``)."""
        self.serve_args = serve_args
        self.port = free_port()
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.agui_port = free_port() if agui_port else None
        self.agui_url = f"{scheme}://127.0.0.1:{self.agui_port}" if self.agui_port else self.url
        # Requests to a TLS server check its certificate against the one it was given.
        self.verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(tls[0])) if tls else True
        self.token = "proc-token"
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("ANTHROPIC_", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"))
        }
        self.env.update(
            {
                "THREADLINE_DATA_DIR": str(data_dir),
                "AGENT_WORKSPACE": str(workspace),
                "AGENT_WORKSPACES_ROOT": str(_workspaces_root(data_dir, workspace)),
                "AGUI_TOKEN": self.token,
                "PORT": str(self.port),
                "DEMO_MODEL_DELAY_SECONDS": "0",
                "MODEL_RETRY_BACKOFF_SECONDS": "0.01",
                "PYTHONUNBUFFERED": "1",
                **({"AGUI_PORT": str(self.agui_port)} if self.agui_port else {}),
                **({"TLS_CERT_FILE": str(tls[0]), "TLS_KEY_FILE": str(tls[1])} if tls else {}),
                **(env or {}),
            }
        )
        self.log = data_dir / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )

    def start(self) -> ServerProcess:
        migrated = self.manage("migrate", "--noinput")
        assert migrated.returncode == 0, migrated.stderr
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "serve", *self.serve_args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # Several workers are spawned processes, each importing Django anew: give them longer.
        deadline = time.monotonic() + (30 if not self.serve_args else 120)
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                info_url = f"{self.agui_url}{self.env.get('AGUI_PATH', '/agui')}/info"
                info = httpx.get(info_url, headers=self.headers, timeout=1, verify=self.verify)
                if info.status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"server did not start:\n{self.log.read_text()}")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        """A graceful stop (SIGTERM), as a service manager does."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def kill(self) -> None:
        """The process dies with no chance to clean up, and so do its workers (``--workers``), which
        would otherwise live on as orphans through the rest of the suite."""
        if self.proc and self.proc.poll() is None:
            workers = _descendants(self.proc.pid)
            self.proc.kill()  # the supervisor first, so it starts no worker in place of one killed
            self.proc.wait(10)
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    """The processes under ``pid``, children before grandchildren (Linux's /proc)."""
    try:
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return children + [grandchild for child in children for grandchild in _descendants(child)]


@contextlib.contextmanager
def server_pair(tmp_path: Path, env: dict[str, str]) -> Iterator[tuple[Any, ServerProcess, ServerProcess]]:
    """Two server processes ``a`` and ``b`` on one workspace, with the Messages API faked; ``env``
    gives them their shared database and Redis. Both are killed afterwards."""
    from tests.fakes.anthropic_api import FakeAnthropic

    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        shared = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, **env}
        servers: list[ServerProcess] = []
        try:
            for label in ("a", "b"):
                (tmp_path / label).mkdir()
                servers.append(ServerProcess(data_dir=tmp_path / label, workspace=workspace, env=shared).start())
            yield fake, servers[0], servers[1]
        finally:
            for server in servers:
                server.kill()
