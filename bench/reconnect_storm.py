"""A reconnect storm against ``manage.py serve`` (issue #27, item 1).

    .venv/bin/python bench/reconnect_storm.py                      # 5,000 streams, the default cap
    .venv/bin/python bench/reconnect_storm.py --streams 10000
    .venv/bin/python bench/reconnect_storm.py --cap 2000           # the storm against a cap of 2,000

A real ``manage.py serve`` (SQLite, the anthropic SDK path against FakeAnthropic) has one run in
flight, held by its model; then ``--streams`` reattach streams to it are opened at once, as every page
does after a restart: every connection first (from many client addresses, so no client's own cap is
reached), then every request. Printed: how many were served (200, a stream) and refused (503
``server_full`` with Retry-After), the time until every one had its answer, and the time until every
served stream ended with RUN_FINISHED once the model went on.

The baseline, in the same run: the same storm against a second server whose cap is below the
storm (``--baseline-cap``, by default 2/5 of it): it serves exactly its cap and refuses only the rest.
Target: with the default cap the whole storm is served; with a cap below it, exactly the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

import httpx
from httpclient import CLOCK
from processes import PYTHON, REPO, TOKEN, FakeModel, Lab, base_env

sys.path.insert(0, str(REPO))

from tests.burst import Answer, open_burst, spread

THREAD, RUN = "t-storm", "r1"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Storm:
    label: str
    streams: int
    cap_line: str
    statuses: Counter[int]
    server_full: int  # the 503s with code server_full and a Retry-After
    answered_seconds: float
    finished: int  # the served streams that ended with RUN_FINISHED
    finished_seconds: float

    @property
    def served(self) -> int:
        return self.statuses[200]


def _sources(streams: int, per_client: int) -> list[str]:
    """Enough loopback addresses (127.1.x.y) that no client passes its own cap."""
    count = max(64, -(-streams // max(1, per_client - 1)))
    addresses = [f"127.1.{i // 250}.{i % 250 + 1}" for i in range(count)]
    return spread(streams, addresses)


class Serve:
    """``manage.py serve`` in a data dir of the lab, on a free port, with the fake model."""

    def __init__(self, lab: Lab, fake: FakeModel, name: str, cap: int | None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = lab.threadline_env(lab.data_dir(name)) | {
            "PORT": str(self.port),
            "AGENT_WORKSPACES_ROOT": str(lab.tmp / f"workspaces-{name}"),
            "ANTHROPIC_API_KEY": "bench-not-a-key",
            "ANTHROPIC_BASE_URL": fake.base_url,
        }
        env.pop("SERVER_MAX_CONNECTIONS", None)
        if cap is not None:
            env["SERVER_MAX_CONNECTIONS"] = str(cap)
        self.log_path = lab.tmp / f"serve-{name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [PYTHON, "manage.py", "serve"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"manage.py serve exited:\n{self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.url}/agui/info", headers=HEADERS, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"manage.py serve did not start:\n{self.log_path.read_text()}")

    def settings(self) -> tuple[str, int]:
        """The start-up banner's connections line, and the per-client cap it implies (a quarter)."""
        line = next(line for line in self.log_path.read_text().splitlines() if "Connections:" in line)
        cap = int(line.split("cap ", 1)[1].split()[0])
        return line.strip(), max(1, cap // 4)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _hold_a_run(serve: Serve, fake: FakeModel) -> None:
    """Starts run RUN and leaves it held by its model; its own POST is closed (the run goes on)."""
    fake.command("hold")
    body = {
        "threadId": THREAD,
        "runId": RUN,
        "messages": [{"id": "m1", "role": "user", "content": "hold on"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        "protocolVersion": "1.0",
    }
    with httpx.stream("POST", f"{serve.url}/agui/coder", json=body, headers=HEADERS, timeout=60) as response:
        if response.status_code != 200:
            raise RuntimeError(f"the run's POST answered {response.status_code}")
        for chunk in response.iter_bytes():
            if b"TEXT_MESSAGE_CONTENT" in chunk:
                break  # the model's first token: it holds now


async def storm(lab: Lab, fake: FakeModel, label: str, streams: int, cap: int | None) -> Storm:
    serve = Serve(lab, fake, "default" if cap is None else f"cap-{cap}", cap)
    try:
        cap_line, per_client = serve.settings()
        _hold_a_run(serve, fake)
        request = (
            f"GET /agui/coder/threads/{THREAD}/runs/{RUN}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
        started = CLOCK()
        opened, answers = await open_burst(serve.port, [request] * streams, _sources(streams, per_client))
        try:
            await opened.read_refusals()
            answered = CLOCK() - started
            full = sum(
                answer.error_code == "server_full" and int(answer.headers.get("retry-after", "0")) >= 1
                for answer in opened.refused()
            )
            served = [answer for answer in answers if answer.status == 200]
            released = CLOCK()
            fake.command("release")
            finished = await asyncio.gather(*(_finished(answer) for answer in served))
            return Storm(
                label,
                streams,
                cap_line,
                opened.statuses(),
                full,
                answered,
                sum(finished),
                CLOCK() - released,
            )
        finally:
            await opened.close()
    finally:
        fake.command("release")
        serve.stop()


async def _finished(answer: Answer) -> bool:
    try:
        await asyncio.wait_for(answer.read_until(b"RUN_FINISHED"), 600)
    except (ConnectionError, TimeoutError):
        return False
    return True


def report(storms: list[Storm]) -> tuple[str, bool]:
    lines = ["Reconnect storm: reattach streams opened at once on one manage.py serve (SQLite, SDK path)"]
    met = True
    for s in storms:
        others = {status: count for status, count in s.statuses.items() if status not in (200, 503)}
        lines += [
            f"  {s.label}: {s.cap_line}",
            f"    {s.streams:,} streams: {s.served:,} served, {s.statuses[503]:,} refused "
            f"({s.server_full:,} server_full with Retry-After)"
            + (f", other answers {others}" if others else "")
            + f"; all answered in {s.answered_seconds:.1f}s",
            f"    served streams that ended with RUN_FINISHED once the model went on: {s.finished:,} "
            f"in {s.finished_seconds:.1f}s",
        ]
    for s in storms:
        cap = int(s.cap_line.split("cap ", 1)[1].split()[0])
        expected = min(cap, s.streams)
        ok = s.served == expected == s.finished and s.server_full == s.streams - expected
        met &= ok
        lines.append(
            f"  target ({s.label}): {expected:,} served and {s.streams - expected:,} refused: "
            + ("MET" if ok else "MISSED")
        )
    return "\n".join(lines), met


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=5000, help="reattach streams opened at once (5000)")
    parser.add_argument("--cap", type=int, default=None, help="SERVER_MAX_CONNECTIONS (default: the server's own)")
    parser.add_argument(
        "--baseline-cap",
        type=int,
        default=None,
        help="the cap of the baseline storm, below the storm (default: 2/5 of --streams; 0: no baseline)",
    )
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")
    args = parser.parse_args()
    baseline_cap = args.streams * 2 // 5 if args.baseline_cap is None else args.baseline_cap
    os.environ.pop("DATABASE_URL", None)  # SQLite: the storm is about connections, not the database
    lab = Lab("uvicorn", "uvloop", keep=False)
    fake = FakeModel(base_env(), lab.tmp / "fake-model.log")
    lab.fakes.append(fake)
    try:
        label = "default cap" if args.cap is None else f"cap {args.cap}"
        storms = [await storm(lab, fake, label, args.streams, args.cap)]
        if baseline_cap:
            storms.append(await storm(lab, fake, f"baseline, cap {baseline_cap}", args.streams, baseline_cap))
    finally:
        lab.close()
    text, met = report(storms)
    print(text, flush=True)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
