"""A process that drains (SIGTERM, a deploy; issue #45 item 4).

It takes no new run (the views answer ``503 draining`` with ``Retry-After``; reads and reattaches are
still served) and takes nothing over. Each of its running runs goes on to its next step boundary (a
model turn done, a turn's tool results stored: orchestrator/loop.py asks ``hand_over`` there) and
stops there: its log ends where it is, without a terminal event, its lease is let go and marked a
hand-over (threads/takeover.py ``run_release``), and the sweep of another process goes on with it at
once, in the same run. A hand-over is not a crash: it does not count towards RUN_MAX_TAKEOVERS. A run
whose next boundary is its end just finishes. With RUN_MAX_TAKEOVERS 0 nobody would take a run over:
runs are left to finish.

What has not reached a boundary within SERVER_DRAIN_SECONDS is stopped inside its step and handed
over as well (the host's ``drain_for_exit``): its model turn is made again; a mutating tool call in
flight is reported to the model as interrupted (orchestrator/takeover.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from django.conf import settings

from runhost.registry import LiveRun


class Draining(Protocol):
    @property
    def draining(self) -> bool: ...


def hand_over_now(live: LiveRun) -> bool:
    """Marks the run handed over and stops its stream where it is (nothing more is published: the
    process that goes on with it continues the log). False when it has no stream to stop yet."""
    if live.stream is None:
        return False
    live.handing_over = True
    live.stream.hand_over()
    return True


def at_step_boundary(live: LiveRun, host: Draining) -> Callable[[], bool]:
    """The loop's ``hand_over``: True, at a step boundary, once the process drains."""

    def hands_over() -> bool:
        if not host.draining or not settings.RUN_MAX_TAKEOVERS or live.cancel_requested or live.lost:
            return False
        return hand_over_now(live)

    return hands_over
