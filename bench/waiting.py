"""What a waiting thread costs the server: RSS per thread left waiting on an approval.

Starts ``manage.py serve`` (SQLite, a throwaway data dir) against a loopback fake
of the Messages API, then measures the server's resident memory:

- after warming up (a few runs through every path);
- after N threads that ran to the end (the baseline: what any thread leaves);
- after N more threads, each left waiting on an approval.

A waiting run is a row, not a task, so the two should cost about the same.

    .venv/bin/python bench/waiting.py [--threads 1000]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn  # noqa: E402

TOKEN = "bench-token"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(client: httpx.Client, url: str, thread_id: str, text: str) -> bytes:
    body = {
        "threadId": thread_id,
        "runId": "r1",
        "protocolVersion": "1.0",
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    return client.post(url, json=body, headers={"Authorization": f"Bearer {TOKEN}"}).content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1000)
    count = parser.parse_args().threads
    work = Path(tempfile.mkdtemp(prefix="threadline-bench-waiting-"))
    (work / "ws").mkdir()
    port = _port()
    with FakeAnthropic() as fake:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_URL", "REDIS_URL"))},
            "THREADLINE_DATA_DIR": str(work),
            "AGENT_WORKSPACE": str(work / "ws"),
            "AGUI_TOKEN": TOKEN,
            "PORT": str(port),
            "ANTHROPIC_API_KEY": "sk-bench",
            "ANTHROPIC_BASE_URL": fake.base_url,
        }
        manage = [sys.executable, "manage.py"]
        subprocess.run([*manage, "migrate", "-v0"], cwd=REPO, env=env, check=True)
        log = open(work / "server.log", "wb")
        server = subprocess.Popen([*manage, "serve"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/agui/coder"
        try:
            with httpx.Client(timeout=60) as client:
                for _ in range(600):
                    try:
                        client.get(f"http://127.0.0.1:{port}/agui/info", headers={"Authorization": f"Bearer {TOKEN}"})
                        break
                    except httpx.HTTPError:
                        time.sleep(0.1)
                for i in range(20):  # warm up: imports, caches, connection pools
                    fake.script([text_turn(["warm"])])
                    _post(client, url, f"warm-{i}", "hello")
                warm = _rss_kib(server.pid)
                began = time.monotonic()
                for i in range(count):
                    fake.script([text_turn(["done"])])
                    _post(client, url, f"done-{i}", "hello")
                finished = _rss_kib(server.pid)
                finished_seconds = time.monotonic() - began
                began = time.monotonic()
                for i in range(count):
                    fake.script([tool_turn("file_write", {"path": f"f{i}.txt", "content": "x"})])
                    assert b'"interrupt"' in _post(client, url, f"wait-{i}", "write it")
                waiting = _rss_kib(server.pid)
                waiting_seconds = time.monotonic() - began
                threads = _threads(server.pid)
        finally:
            server.terminate()
            server.wait(30)
            log.close()
    per_finished = (finished - warm) / count
    per_waiting = (waiting - finished) / count
    print(f"threads per kind: {count}   server OS threads at the end: {threads}")
    print(f"RSS after warm-up:                  {warm / 1024:8.1f} MiB")
    print(
        f"+ {count} finished threads (baseline): {finished / 1024:8.1f} MiB  {per_finished:6.2f} KiB/thread  "
        f"{count / finished_seconds:6.0f} runs/s"
    )
    print(
        f"+ {count} waiting threads:            {waiting / 1024:8.1f} MiB  {per_waiting:6.2f} KiB/thread  "
        f"{count / waiting_seconds:6.0f} runs/s"
    )
    ratio = per_waiting / per_finished if per_finished > 0 else float("nan")
    print(f"a waiting thread costs {ratio:.2f}x a finished one")


if __name__ == "__main__":
    main()
