"""Whether a run's owning process is gone, so its thread may heal."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from datetime import timedelta

from django.utils import timezone

from threads.leases import owner_is_gone

HOST = socket.gethostname()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_an_expired_lease_means_gone_wherever_the_owner_ran():
    past = timezone.now() - timedelta(seconds=1)
    assert owner_is_gone("elsewhere:123", past)
    assert owner_is_gone(f"{HOST}:{os.getpid()}", past)
    assert owner_is_gone("elsewhere:123", None)


def test_a_dead_process_on_this_host_is_gone_before_its_lease_ends():
    future = timezone.now() + timedelta(seconds=30)
    assert owner_is_gone(f"{HOST}:{_dead_pid()}", future)


def test_a_live_process_holds_its_runs_while_the_lease_lasts():
    future = timezone.now() + timedelta(seconds=30)
    assert not owner_is_gone(f"{HOST}:{os.getppid()}", future)
    assert not owner_is_gone(f"{HOST}:{os.getpid()}", future)
    assert not owner_is_gone("another-host:1", future)
