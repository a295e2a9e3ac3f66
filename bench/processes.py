"""The processes of a bench run and the temporary directory they share.

Each server under test runs bench/servers.py in its own subprocess, on its own
loopback port; the SDK variant also gets a FakeAnthropic process
(bench/fake_model.py). Separate processes keep the servers, the fake model and
the measuring client from taking each other's CPU time (and GIL).
``Lab.close()`` stops every one of them and removes the directory; the servers
also stop by themselves if the bench process dies (see servers.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from httpclient import Client

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PYTHON = sys.executable
TOKEN = "bench-token"  # AGUI_TOKEN of the Threadline servers

LABELS = {
    "bare": "bare ASGI app (baseline 1)",
    "django": "plain Django view (baseline 2)",
    "sdk": "Threadline, anthropic SDK + FakeAnthropic",
    "scripted": "Threadline, in-process scripted model",
    "serve": "Threadline, scripted model, manage.py serve",
}
ALL_SERVERS = ("bare", "django", "sdk", "scripted")  # the servers of the table (serve: bench/operators.py)
FULL_STACK = ("sdk", "scripted")


class FakeModel:
    """bench/fake_model.py in its own process: FakeAnthropic, told over a pipe which replies to serve."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [PYTHON, str(BENCH / "fake_model.py")],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().decode().strip()
        if not self.base_url.startswith("http://"):
            raise RuntimeError(f"FakeAnthropic did not start (said {self.base_url!r}); see {log_path}")

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().decode().strip()
        if answer != "ok":
            raise RuntimeError(f"FakeAnthropic: {answer or 'no answer'}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"quit\n")
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


class ServerProc:
    """One server subprocess (bench/servers.py NAME), listening on a loopback port chosen by the OS."""

    def __init__(
        self, name: str, env: dict[str, str], argv: list[str], log_path: Path, fake: FakeModel | None = None
    ) -> None:
        self.name = name
        self.env = env
        self.log_path = log_path
        self.fake = fake  # the FakeAnthropic this server talks to (sdk only)
        # The listening socket is made here and inherited by the child, so the port
        # is known at once, is never raced for, and queues requests until the app is up.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(1024)
        self.port: int = sock.getsockname()[1]
        log = open(log_path, "wb")
        try:
            self.proc = subprocess.Popen(
                [PYTHON, str(BENCH / "servers.py"), name, "--fd", str(sock.fileno()), *argv],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(sock.fileno(),),
            )
        finally:
            log.close()
            sock.close()  # the child has its own copy
        self.find_database(env)

    def find_database(self, env: dict[str, str]) -> None:
        """The Threadline server's database, read to see when a run is recorded: its PostgreSQL
        database when it has one, else its SQLite file (read-only)."""
        data_dir = env.get("THREADLINE_DATA_DIR")
        self.db_url = env.get("DATABASE_URL", "")
        self.db_path = Path(data_dir) / "threadline.sqlite3" if data_dir and not self.db_url else None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server {self.name} exited early; its log ends:\n{self.log_tail()}")

    async def wait_answering(self, path: str, headers: dict[str, str], within: float = 90.0) -> None:
        """Until ``GET path`` answers 200 (the server is up and migrated); raises with its log's end if
        it dies or does not answer within ``within`` seconds."""
        deadline = time.monotonic() + within
        while True:
            self.check_alive()
            client = Client(self.port)
            try:
                response = await client.request("GET", path, b"", headers, within=5)
                if response.status == 200:
                    return
            except (TimeoutError, ConnectionError, OSError):
                pass
            finally:
                client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"manage.py serve did not become ready; its log ends:\n{self.log_tail()}")
            await asyncio.sleep(0.2)

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class ServeProc(ServerProc):
    """Threadline as ``make run`` starts it: ``manage.py serve`` on a loopback port, in its own process
    (the memory figure is measured on this process, not on servers.py's)."""

    def __init__(self, name: str, env: dict[str, str], log_path: Path, fake: FakeModel | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self.fake = fake
        # serve binds its own socket: a free port is picked here, and the bench waits until it answers.
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PYTHON, "manage.py", "serve"],
                cwd=REPO,
                env=env | {"HOST": "127.0.0.1", "PORT": str(self.port)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.find_database(env)


def database_url_with_name(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def base_env() -> dict[str, str]:
    """This environment without what could point a server elsewhere (a real API key, a database, settings)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "DJANGO_", "BENCH_")) and k not in ("DATABASE_URL", "REDIS_URL")
    }
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Lab:
    """Starts the servers of one bench run in a temporary directory; close() stops them and removes it.

    With ``database_url`` (a PostgreSQL URL), each full-stack server gets a fresh database of its
    own on that server, migrated, and dropped at close; otherwise a SQLite file in its data dir."""

    def __init__(self, server: str, loop: str, keep: bool, database_url: str = "") -> None:
        self.argv = ["--server", server, "--loop", loop]
        self.keep = keep
        self.database_url = database_url
        self.databases: list[str] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="threadline-bench-"))
        self.servers: list[ServerProc] = []
        self.fakes: list[FakeModel] = []
        self.template: Path | None = None

    def threadline_env(self, data_dir: Path) -> dict[str, str]:
        return base_env() | {
            "DJANGO_SETTINGS_MODULE": "project.settings",
            "THREADLINE_DATA_DIR": str(data_dir),
            "AGUI_TOKEN": TOKEN,
            "LOG_LEVEL": "WARNING",
            "AGENT_WORKSPACE": str(self.tmp / "workspace"),
        }

    def data_dir(self, name: str) -> Path:
        """A fresh, migrated data dir: migrated once into a template, then copied (much faster than migrating)."""
        if self.template is None:
            self.template = self.tmp / "data-template"
            (self.tmp / "workspace").mkdir()
            (self.tmp / "workspace" / "README.md").write_text("bench workspace\n")
            done = subprocess.run(
                [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=REPO,
                env=self.threadline_env(self.template),
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(f"manage.py migrate failed:\n{done.stdout}\n{done.stderr}")
        path = self.tmp / f"data-{name}"
        shutil.copytree(self.template, path)
        return path

    def postgres_database(self, label: str) -> str:
        """A fresh, migrated PostgreSQL database on the server of ``database_url``; returns its URL."""
        import psycopg

        name = f"tl_bench_{label.replace('-', '_')}_{os.getpid()}"
        with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        url = database_url_with_name(self.database_url, name)
        done = subprocess.run(
            [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=REPO,
            env=self.threadline_env(self.tmp / f"data-{label}") | {"DATABASE_URL": url},
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py migrate on {name} failed:\n{done.stdout}\n{done.stderr}")
        return url

    def start(
        self, name: str, extra_env: dict[str, str] | None = None, tag: str = "", serve: bool = False
    ) -> ServerProc:
        """Starts server ``name`` (one of ALL_SERVERS) without waiting for it to be ready; ``tag``
        tells apart two servers of the same kind (their data dirs and logs). ``serve``: a full stack
        as ``make run`` starts it (``manage.py serve``), not under bench/servers.py."""
        fake = None
        label = f"{name}-{tag}" if tag else name
        if name in ("bare", "relay"):
            env = base_env()
        elif name == "django":
            env = base_env() | {"BENCH_TMP": str(self.tmp)}  # where django_min puts its (unused) SQLite file
        else:
            env = self.threadline_env(self.data_dir(label))
            if self.database_url:
                env["DATABASE_URL"] = self.postgres_database(label)
            if name == "sdk":
                fake = FakeModel(base_env(), self.tmp / "fake-model.log")
                self.fakes.append(fake)
                env |= {"ANTHROPIC_API_KEY": "bench-not-a-key", "ANTHROPIC_BASE_URL": fake.base_url}
        log_path = self.tmp / f"server-{label}.log"
        if serve:
            server: ServerProc = ServeProc(name, env | (extra_env or {}), log_path, fake)
        else:
            server = ServerProc(name, env | (extra_env or {}), self.argv, log_path, fake)
        self.servers.append(server)
        return server

    def close(self) -> None:
        for server in self.servers:
            try:
                server.stop()
            except Exception as exc:  # keep cleaning up
                print(f"warning: could not stop server {server.name}: {exc}", file=sys.stderr)
        for fake in self.fakes:
            try:
                fake.stop()
            except Exception as exc:
                print(f"warning: could not stop FakeAnthropic: {exc}", file=sys.stderr)
        if self.databases and not self.keep:
            import psycopg

            try:
                with psycopg.connect(self.database_url, autocommit=True, connect_timeout=5) as admin:
                    for name in self.databases:
                        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.Error as exc:
                print(f"warning: could not drop the bench databases {self.databases}: {exc}", file=sys.stderr)
        if self.keep:
            print(f"kept {self.tmp}" + (f" and the databases {', '.join(self.databases)}" if self.databases else ""))
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)
