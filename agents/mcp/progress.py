"""An MCP call's progress notifications, coalesced (issue #49 item 11): a server may send them as
fast as it likes (100,000 became 100,018 stored events), and each one the run reports is an event
stored in the run's log and sent to every client. So a call reports at most one every
``INTERVAL`` seconds: the first at once, then the latest of those that came in between when the
interval ends, and the latest still held when the call ends, before its result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

INTERVAL = 0.25  # at most four a second per call

Report = Callable[[float, float | None, str | None], None]


class CoalescedProgress:
    """A progress callback for one call (the SDK's ``progress_callback``) that hands ``report`` the
    latest notification at most once every ``interval`` seconds. ``close()`` when the call ends."""

    def __init__(self, report: Report, *, interval: float = INTERVAL) -> None:
        self._report = report
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._last = -interval  # loop time of the last report
        self._held: tuple[float, float | None, str | None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self._closed:
            return  # one that came after the result: the result said more
        now = self._loop.time()
        if self._timer is None and now - self._last >= self._interval:
            self._last = now
            self._report(progress, total, message)
            return
        self._held = (progress, total, message)
        if self._timer is None:
            self._timer = self._loop.call_at(self._last + self._interval, self._flush)

    def _flush(self) -> None:
        self._timer = None
        held, self._held = self._held, None
        if held is not None:
            self._last = self._loop.time()
            self._report(*held)

    def close(self) -> None:
        """Reports the notification still held, if any, and stops the timer."""
        if self._timer is not None:
            self._timer.cancel()
        self._flush()
        self._closed = True
