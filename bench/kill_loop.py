"""A kill -9 loop: the server dies at random points of tool-calling runs, and nothing is lost.

Each round starts ``manage.py serve`` (SQLite, a throwaway data dir, the model faked on
loopback, bash auto-approved), starts a run whose model calls bash twice (each call sleeps),
kills the server with SIGKILL at a random moment, and starts it again. Then:

- every run's event log, replayed, ends with RUN_FINISHED or RUN_ERROR;
- every thread takes its next message and finishes it;
- no bash child of a killed server is left alive.

    .venv/bin/python bench/kill_loop.py [--kills 20] [--seed 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn  # noqa: E402
from tests.sse import get_stream, post_run  # noqa: E402

TOKEN = "bench-token"
MARK = "threadline-kill-loop"  # in every bash command, to find children left alive


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive_children() -> int:
    found = subprocess.run(["pgrep", "-f", MARK], capture_output=True, text=True)
    return len([line for line in found.stdout.split() if line.strip()])


class Server:
    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{env['PORT']}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "manage.py", "serve"], cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        for _ in range(600):
            try:
                if httpx.get(f"{self.url}/agui/info", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the server did not start; see {self.log}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    work = Path(tempfile.mkdtemp(prefix="threadline-bench-kill-"))
    (work / "ws").mkdir()
    with FakeAnthropic() as fake:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_URL", "REDIS_URL"))},
            "THREADLINE_DATA_DIR": str(work),
            "AGENT_WORKSPACE": str(work / "ws"),
            "AGUI_TOKEN": TOKEN,
            "PORT": str(_port()),
            "ANTHROPIC_API_KEY": "sk-bench",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "AGENT_MUTATING_TOOLS": "on",
            "RUN_LEASE_SECONDS": "2",
        }
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True)
        server = Server(env, work / "server.log")
        server.start()
        threads = []
        for i in range(options.kills):
            thread_id = f"kill-{i}"
            threads.append(thread_id)
            command = {"command": f"echo {MARK} {i}; sleep 0.4; echo done"}
            fake.script_for(
                f"round {i} go",
                [tool_turn("bash", command), tool_turn("bash", command), text_turn(["finished"]), text_turn(["again"])],
            )
            body = {
                "threadId": thread_id,
                "runId": "r1",
                "protocolVersion": "1.0",
                "messages": [{"id": "u1", "role": "user", "content": f"round {i} go"}],
            }
            runner = threading.Thread(target=_send, args=(server.url, body))
            runner.start()
            time.sleep(rng.uniform(0.05, 1.5))
            server.kill()
            runner.join(30)
            server.start()
        time.sleep(2.5)  # the killed runs' leases lapse
        left_alive = _alive_children()
        unterminated = failed_next = never_started = 0
        runs = 0
        for thread_id in threads:
            follow = get_stream(f"{server.url}/agui/coder/threads/{thread_id}/events", token=TOKEN, timeout=30)
            marker = int(thread_id.split("-")[1])
            messages = [{"id": "u1", "role": "user", "content": f"round {marker} go"}]
            if follow.status == 404:
                never_started += 1  # killed before the thread was written: its first message goes again
            else:
                runs += 1
                if not follow.types or follow.types[-1] not in ("RUN_FINISHED", "RUN_ERROR"):
                    unterminated += 1
                messages.append({"id": "u2", "role": "user", "content": "go on"})
            body = {"threadId": thread_id, "runId": "r2", "protocolVersion": "1.0", "messages": messages}
            after = post_run(server.url, "coder", body, token=TOKEN, timeout=60)
            if not after.types or after.types[-1] != "RUN_FINISHED":
                failed_next += 1
                print(f"{thread_id}: its next message ended with {after.events[-1:] or after.status}")
        server.kill()
    print(f"kills: {options.kills}   runs replayed: {runs}   killed before their thread was written: {never_started}")
    print(f"logs without a terminal event: {unterminated}")
    print(f"threads that did not take their next message: {failed_next}")
    print(f"bash children left alive after the kills: {left_alive}")


def _send(url: str, body: dict[str, object]) -> None:
    with contextlib.suppress(httpx.HTTPError):  # the server is killed under the request
        post_run(url, "coder", body, token=TOKEN)


if __name__ == "__main__":
    main()
