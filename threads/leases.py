"""Which server process owns a running run, and whether that process is still there.

A run is owned by the process that started it. While it runs, its owner renews
a lease on it. Another process may treat the run as abandoned (and heal its
thread) when the lease has expired, or at once when the owner was a process on
this same host that no longer exists, as after a crash and a restart.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone


def lease_length() -> timedelta:
    """How long a claim holds without renewal; the owner renews it every third of that."""
    return timedelta(seconds=settings.RUN_LEASE_SECONDS)


def owner_id() -> str:
    """This process, as recorded on the runs it owns (computed on use: a fork changes the pid)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_is_gone(owner: str, lease_expires_at: datetime | None, now: datetime | None = None) -> bool:
    now = now or timezone.now()
    if lease_expires_at is None or lease_expires_at < now:
        return True
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another host's process: only its lease can tell
    return int(pid) != os.getpid() and not _process_exists(int(pid))


def lease_until(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + lease_length()


class RunTakenOver(Exception):
    """Another process took the run over while this one still worked on it (this one stalled past
    its lease): what it was writing is rolled back, the run being the other's now."""
