"""A server process's threads, file descriptors and memory, read from /proc (Linux)."""

from __future__ import annotations

import os


def proc_figures(pid: int) -> tuple[int, int, float, float]:
    """(OS threads, open fds, RSS MiB, peak RSS MiB) of a process."""
    status: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            name, _, value = line.partition(":")
            status[name] = value.strip()
    return (
        int(status["Threads"]),
        len(os.listdir(f"/proc/{pid}/fd")),
        int(status["VmRSS"].split()[0]) / 1024,
        int(status["VmHWM"].split()[0]) / 1024,
    )
