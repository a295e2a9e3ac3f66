"""What bash's network proxy costs a download (issue #47).

Serves ``--megabytes`` (50 by default) from a local HTTP server on 127.0.0.2, then times, in the same
run:
- the baseline: ``curl`` on the host, outside any sandbox, straight to the server;
- the same ``curl`` from bash's sandbox, through the call's forwarder and Threadline's proxy
  (``run_shell`` with a sandbox whose policy allows 127.0.0.2, listed as a private host the operator
  allows), which includes starting the sandbox, the forwarder and the proxy.

Each is the median of ``--rounds`` rounds, printed in seconds, MB/s and as a ratio of the baseline,
with what a call of ``true`` in the same sandbox costs (its start, which the download includes).
Needs bwrap, setpriv (as root) and curl.

    .venv/bin/python bench/bash_egress.py [--megabytes 50] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from orchestrator.tools.egress import EgressBounds, EgressPolicy, HostPattern  # noqa: E402
from orchestrator.tools.sandbox import Sandbox  # noqa: E402
from orchestrator.tools.shaping import OutputLimits  # noqa: E402
from orchestrator.tools.shell import run_shell  # noqa: E402

ADDRESS = "127.0.0.2"
SANDBOX_UID = 65534


def serve(size: int) -> http.server.ThreadingHTTPServer:
    chunk = b"x" * (1 << 20)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            left = size
            while left:
                part = chunk[: min(left, len(chunk))]
                self.wfile.write(part)
                left -= len(part)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((ADDRESS, 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def median_seconds(action: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.megabytes << 20
    bwrap, curl = shutil.which("bwrap"), shutil.which("curl")
    if bwrap is None or curl is None:
        sys.exit("bwrap and curl are needed")
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") if root else None
    server = serve(size)
    url = f"http://{ADDRESS}:{server.server_address[1]}/file"
    policy = EgressPolicy(
        "allowlist",
        allowed=(HostPattern(ADDRESS),),
        allowed_private_hosts=frozenset({ADDRESS}),
        bounds=EgressBounds(max_bytes=size * 2),
    )
    with tempfile.TemporaryDirectory(prefix="threadline-bench-egress-") as workspace:
        if root:
            os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
        sandbox = Sandbox(bwrap, Path(workspace), egress=policy, run_as=SANDBOX_UID if root else None, setpriv=setpriv)
        command = f"curl -sS -o /dev/null -w '%{{size_download}}' {url}"
        env = sandbox.environment({"PATH": "/usr/local/bin:/usr/bin:/bin"})

        def outside() -> None:
            done = subprocess.run(["/bin/bash", "-c", command], capture_output=True, text=True, check=True)
            assert done.stdout == str(size), done.stdout

        def through_the_proxy() -> None:
            result = asyncio.run(
                run_shell(command, cwd=workspace, time_limit=600, env=env, limits=OutputLimits(), sandbox=sandbox)
            )
            assert result.output.text.startswith(str(size)), result.output.text
            assert result.network is not None and result.network.total_bytes >= size

        def start_only() -> None:
            asyncio.run(
                run_shell("true", cwd=workspace, time_limit=60, env=env, limits=OutputLimits(), sandbox=sandbox)
            )

        baseline = median_seconds(outside, args.rounds)
        proxied = median_seconds(through_the_proxy, args.rounds)
        started = median_seconds(start_only, args.rounds)
    server.shutdown()
    megabytes = size / 1e6
    print(f"{args.megabytes} MiB download, median of {args.rounds}")
    print(f"  outside the sandbox (curl on the host):   {baseline:7.3f} s  {megabytes / baseline:8.1f} MB/s")
    print(f"  from bash's sandbox through the proxy:    {proxied:7.3f} s  {megabytes / proxied:8.1f} MB/s")
    print(f"  ratio (proxy / outside):                  {proxied / baseline:7.2f}")
    print(f"  of which the sandbox, forwarder and proxy starting (a call of `true`): {started:.3f} s")


if __name__ == "__main__":
    main()
