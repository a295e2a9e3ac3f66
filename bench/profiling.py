"""``--profile``: where a full-stack server spends its time per event while it streams long replies.

Runs after the measured rounds, on the same server process, over a few more long
replies (each waited for until its run is recorded, since the log write after the
last byte is part of the cost). Two tools:

  py-spy    samples the server process from outside (1000 Hz, all threads, pausing the
            process at each sample so stacks are whole); reports busy CPU per event
            split by thread, and the functions with the most self and inclusive time.
            The test extras install it in the venv (or set PY_SPY).
  cprofile  the server's own cProfile, switched on only for these replies (see
            servers.py). It traces every call in every thread, which inflates small
            functions and counts waits; read its proportions, not its totals.
"""

from __future__ import annotations

import asyncio
import collections
import os
import pstats
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from httpclient import CLOCK
from measure import Target
from processes import REPO

PY_SPY_RATE = 1000  # samples per second
PRODUCT_FILES = ("agui/", "agents/", "threads/", "project/")
# Leaf frames of threads that are blocked waiting (an idle executor worker, the parent watchdog).
IDLE_LEAVES = (
    "_worker (concurrent/futures/thread.py:",
    "_exit_with_parent.<locals>.watch (",
    "wait (threading.py:",
    "Condition.wait (threading.py:",  # as newer py-spy names it
    "Event.wait (threading.py:",
)


def find_py_spy() -> str | None:
    beside_python = os.path.join(os.path.dirname(sys.executable), "py-spy")  # the venv's, from the test extras
    for candidate in (os.environ.get("PY_SPY"), beside_python, shutil.which("py-spy"), "/tmp/pyspy/bin/py-spy"):
        if candidate and os.path.exists(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


async def profile(target: Target, tool: str, tokens: int, streams: int, out: Path, *, at_once: bool = False) -> str:
    """Profiles ``streams`` replies of ``tokens`` tokens into ``out``; returns the summary.
    ``at_once``: all of them concurrently (the concurrent mode's load), rather than one by one.
    For cprofile the server must have been started with BENCH_PROFILE=out."""
    spy = None
    if tool == "py-spy":
        spy = start_py_spy(target.server.proc.pid, out)
        await asyncio.sleep(1.0)  # let it attach
    else:
        await target.client.request("POST", "/bench/profile/start")
    frames = 0
    started = CLOCK()
    try:
        if at_once:
            # One event per token, near enough (a reply's dozen framing events are 0.5% of 2,000).
            _, errors = await target.measure_concurrent(streams, tokens)
            frames = streams * tokens
            if errors:
                print(f"  {errors} of the profiled streams failed", flush=True)
        for _ in range(0 if at_once else streams):
            target.queue_replies(f"bench {tokens}")
            _, count, run_id = await target.request(tokens, settle=False)
            await target.recorded(run_id)  # the log write after the last byte is part of the cost
            frames += count
    finally:
        py_spy_errors = stop_py_spy(spy) if spy is not None else ""
    elapsed = CLOCK() - started
    if spy is None:
        await target.client.request("POST", "/bench/profile/stop")  # the server writes the stats, then answers
    head = f"  {streams} streams x {tokens} tokens = {frames} events in {elapsed:.2f}s"
    return f"{head}\n{_summarize(tool, out, frames, py_spy_errors)}"


def start_py_spy(pid: int, out: Path, rate: int = PY_SPY_RATE, nonblocking: bool = False) -> subprocess.Popen[bytes]:
    """``nonblocking``: sample without pausing the process (some stacks come out torn, but the
    process keeps its pace: what a latency bench needs)."""
    exe = find_py_spy()
    assert exe is not None
    argv = ["record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--function", "--threads"]
    argv += ["--nonblocking"] if nonblocking else []
    argv += ["--output", str(out), "--duration", "600"]
    return subprocess.Popen([exe, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_py_spy(spy: subprocess.Popen[bytes]) -> str:
    """Stops py-spy (it writes its output when interrupted); returns what it printed on stderr."""
    spy.send_signal(signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    return err.decode(errors="replace")


def _summarize(tool: str, out: Path, events: int, py_spy_errors: str) -> str:
    if not out.exists():
        return f"  {tool} wrote nothing. {py_spy_errors[-500:]}"
    return summarize_py_spy(out, events) if tool == "py-spy" else summarize_cprofile(out, events)


def summarize_py_spy(path: Path, events: int, top: int = 28, rate: int = PY_SPY_RATE) -> str:
    """py-spy raw (collapsed) stacks -> self and inclusive time per function, in µs per event."""
    self_counts: collections.Counter[str] = collections.Counter()
    incl_counts: collections.Counter[str] = collections.Counter()
    per_thread: collections.Counter[str] = collections.Counter()
    loop_threads: set[str] = set()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = "thread (?)"
        if frames[0].startswith("thread ("):
            thread, frames = frames[0], frames[1:]
        if not frames:
            continue
        if any(f.startswith("main (servers.py:") for f in frames):
            loop_threads.add(thread)  # the thread that runs the server's main(): the event loop
        if frames[-1].startswith(IDLE_LEAVES):
            continue  # a thread blocked waiting (py-spy cannot tell while it pauses the process)
        total += count
        per_thread[thread] += count
        self_counts[frames[-1]] += count
        for name in set(frames):
            incl_counts[name] += count
    if not total:
        return "  py-spy recorded no busy samples"

    def us(count: int) -> float:
        return count / rate / events * 1e6

    by_kind: collections.Counter[str] = collections.Counter()
    for thread, count in per_thread.items():
        by_kind["event loop" if thread in loop_threads else "other threads"] += count
    split = ", ".join(f"{kind} {us(count):.2f}" for kind, count in by_kind.most_common())
    lines = [f"  busy CPU in the server process: {us(total):.2f} µs/event ({split})"]
    lines.append("  top functions by self time (µs/event; C calls count in their Python caller):")
    for name, count in self_counts.most_common(top):
        lines.append(f"    {us(count):7.2f}  {100 * count / total:5.1f}%  {name}")
    lines.append("  product functions by inclusive time (µs/event):")
    product = [(n, c) for n, c in incl_counts.items() if any(f"({p}" in n for p in PRODUCT_FILES)]
    for name, count in sorted(product, key=lambda item: -item[1])[:top]:
        lines.append(f"    {us(count):7.2f}  {100 * count / total:5.1f}%  {name}")
    return "\n".join(lines)


def summarize_cprofile(path: Path, events: int, top: int = 30) -> str:
    """cProfile stats -> the functions with the most self time, and product functions by inclusive time."""
    stats = pstats.Stats(str(path))
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        for marker in ("site-packages/", f"{REPO}/"):
            filename = filename.split(marker, 1)[-1]
        rows.append((tt, ct, nc, f"{func} ({filename}:{line})"))
    lines = ["  cProfile — µs/event: self, inclusive, calls/event"]
    for tt, ct, nc, name in sorted(rows, reverse=True)[:top]:
        lines.append(f"    {tt / events * 1e6:7.2f} {ct / events * 1e6:8.2f} {nc / events:6.2f}  {name}")
    lines.append("  product functions by inclusive time:")
    product = [r for r in rows if any(p in r[3] for p in PRODUCT_FILES)]
    for tt, ct, nc, name in sorted(product, key=lambda r: -r[1])[:top]:
        lines.append(f"    {tt / events * 1e6:7.2f} {ct / events * 1e6:8.2f} {nc / events:6.2f}  {name}")
    return "\n".join(lines)
