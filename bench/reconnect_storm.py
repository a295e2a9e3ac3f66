"""A reconnect storm against ``manage.py serve`` (issue #27, item 1).

    .venv/bin/python bench/reconnect_storm.py                      # 5,000 streams, the default cap
    .venv/bin/python bench/reconnect_storm.py --streams 10000
    .venv/bin/python bench/reconnect_storm.py --cap 2000           # the storm against a cap of 2,000
    .venv/bin/python bench/reconnect_storm.py --via-proxy          # every stream through one proxy

A real ``manage.py serve`` (SQLite, the anthropic SDK path against FakeAnthropic) has one run in
flight, held by its model; then ``--streams`` reattach streams to it are opened at once, as every page
does after a restart: every connection first (from many client addresses, so no client's own cap is
reached), then every request. Printed: how many were served (200, a stream) and refused (503
``server_full`` with Retry-After), the time until every one had its answer, and the time until every
served stream ended with RUN_FINISHED once the model went on.

The baseline, in the same run: the same storm against a second server whose cap is below the
storm (``--baseline-cap``, by default 2/5 of it): it serves exactly its cap and refuses only the rest.
Target: with the default cap the whole storm is served; with a cap below it, exactly the cap.

``--via-proxy`` (issue #42, item 4): every connection comes from one address, a trusted proxy
(127.0.0.1, in FORWARDED_ALLOW_IPS by default), as through a CopilotKit runtime or a reverse proxy,
and each stream's ``X-Forwarded-For`` names its client. Meanwhile, when the storm is below the
process's cap, that address asks ``/agui/info`` (its own request, no forwarded header) every 50 ms
until the served streams have ended. Targets as above, and every ``/agui/info`` answered 200. Then
the same storm from an address that is not trusted, with the same headers: they are ignored, and it
is served as one client (its own cap, the rest refused ``too_many_connections``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
PROXY = "127.0.0.1"  # trusted by default (FORWARDED_ALLOW_IPS: loopback's 127.0.0.1 and ::1)
UNTRUSTED = "127.0.0.2"
PROBE_SECONDS = 0.05


@dataclass
class Storm:
    label: str
    streams: int
    cap_line: str
    statuses: Counter[int]
    expected: int  # the streams the target serves
    refused_as: str  # the code of the refusals the target expects
    refusals: int  # the 503s with that code and a Retry-After
    answered_seconds: float
    finished: int  # the served streams that ended with RUN_FINISHED
    finished_seconds: float
    probes: Counter[int] | None  # the statuses of the proxy's own /agui/info, with --via-proxy

    @property
    def served(self) -> int:
        return self.statuses[200]


def _clients(streams: int, per_client: int, prefix: str) -> list[str]:
    """Enough client addresses (``prefix``.x.y) that no client passes its own cap."""
    count = max(64, -(-streams // max(1, per_client - 1)))
    addresses = [f"{prefix}.{i // 250}.{i % 250 + 1}" for i in range(count)]
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
        env.pop("FORWARDED_ALLOW_IPS", None)  # loopback: 127.0.0.1 is the trusted proxy
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


def _reattach(forwarded_for: str | None) -> bytes:
    header = f"X-Forwarded-For: {forwarded_for}\r\n" if forwarded_for else ""
    return (
        f"GET /agui/coder/threads/{THREAD}/runs/{RUN}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n{header}\r\n"
    ).encode()


async def _probe(url: str, statuses: Counter[int], done: asyncio.Event) -> None:
    """The proxy's own ``/agui/info``, every PROBE_SECONDS until ``done``, each on a new connection
    (a proxy opens one when its pool has none idle); a failure to connect or to be answered is 0."""
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(local_address=PROXY), limits=httpx.Limits(max_keepalive_connections=0)
    ) as client:
        while not done.is_set():
            try:
                statuses[(await client.get(f"{url}/agui/info", headers=HEADERS, timeout=30)).status_code] += 1
            except httpx.HTTPError:
                statuses[0] += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), PROBE_SECONDS)


async def storm(lab: Lab, fake: FakeModel, label: str, streams: int, cap: int | None, via: str | None) -> Storm:
    """The storm from many addresses, or with ``via`` from that one address, each stream naming its
    client in X-Forwarded-For."""
    serve = Serve(lab, fake, ("default" if cap is None else f"cap-{cap}") + (f"-via-{via}" if via else ""), cap)
    try:
        cap_line, per_client = serve.settings()
        process_cap = int(cap_line.split("cap ", 1)[1].split()[0])
        _hold_a_run(serve, fake)
        if via is None:
            requests, sources = [_reattach(None)] * streams, _clients(streams, per_client, "127.1")
            expected, refused_as = min(process_cap, streams), "server_full"
        else:
            requests = [_reattach(client) for client in _clients(streams, per_client, "10.1")]
            sources = [via] * streams
            if via == PROXY:
                expected, refused_as = min(process_cap, streams), "server_full"
            else:  # its forwarded headers are ignored: it is one client
                expected, refused_as = min(per_client, streams), "too_many_connections"
        # Asked only while the storm leaves room: a process full of held streams answers nobody more.
        probes: Counter[int] | None = Counter() if via == PROXY and streams < process_cap else None
        done = asyncio.Event()
        prober = asyncio.create_task(_probe(serve.url, probes, done)) if probes is not None else None
        started = CLOCK()
        try:
            opened, answers = await open_burst(serve.port, requests, sources)
            try:
                await opened.read_refusals()
                answered = CLOCK() - started
                refusals = sum(
                    answer.error_code == refused_as and int(answer.headers.get("retry-after", "0")) >= 1
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
                    expected,
                    refused_as,
                    refusals,
                    answered,
                    sum(finished),
                    CLOCK() - released,
                    probes,
                )
            finally:
                await opened.close()
        finally:
            done.set()
            if prober is not None:
                await prober
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
            f"({s.refusals:,} {s.refused_as} with Retry-After)"
            + (f", other answers {others}" if others else "")
            + f"; all answered in {s.answered_seconds:.1f}s",
            f"    served streams that ended with RUN_FINISHED once the model went on: {s.finished:,} "
            f"in {s.finished_seconds:.1f}s",
        ]
        if s.probes is not None:
            lines.append(
                f"    the proxy's own /agui/info meanwhile: {sum(s.probes.values()):,} asked, "
                f"{s.probes[200]:,} answered 200" + (f", others {dict(s.probes)}" if len(s.probes) > 1 else "")
            )
    for s in storms:
        ok = s.served == s.expected == s.finished and s.refusals == s.streams - s.expected
        probes_ok = s.probes is None or (sum(s.probes.values()) > 0 and s.probes[200] == sum(s.probes.values()))
        met &= ok and probes_ok
        lines.append(
            f"  target ({s.label}): {s.expected:,} served and {s.streams - s.expected:,} refused"
            + (", every /agui/info answered" if s.probes is not None else "")
            + ": "
            + ("MET" if ok and probes_ok else "MISSED")
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
    parser.add_argument(
        "--via-proxy",
        action="store_true",
        help="every stream through one trusted proxy address, naming its client in X-Forwarded-For; "
        "then the same from an untrusted address",
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
        via = PROXY if args.via_proxy else None
        through = f", through one trusted proxy ({PROXY})" if via else ""
        storms = [await storm(lab, fake, label + through, args.streams, args.cap, via)]
        if baseline_cap:
            baseline = f"baseline, cap {baseline_cap}{through}"
            storms.append(await storm(lab, fake, baseline, args.streams, baseline_cap, via))
        if args.via_proxy:
            spoof = f"{label}, from an untrusted address ({UNTRUSTED}) with the same headers"
            storms.append(await storm(lab, fake, spoof, args.streams, args.cap, UNTRUSTED))
    finally:
        lab.close()
    text, met = report(storms)
    print(text, flush=True)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
