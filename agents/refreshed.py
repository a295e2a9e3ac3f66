"""A value read from the database, kept, and read again in the background rather than waited for.

What every request needs but rarely changes (the enabled agents, the MCP configuration) is read on
the database thread. Under load that thread is busy with the runs' event logs, and a request that
waited for such a read waited behind them: with 500 replies streaming, /agui/info's p99 was 150 ms
when it waited for a re-read of the MCP configuration every two seconds, and 30 ms when it did not
(bench/stream.py --operators, issue #27 item 5).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class Refreshed[T]:
    """``read()`` as last awaited, for ``ttl`` seconds; then answered as it is while a re-read runs.

    ``current()`` answers at once while the value is younger than twice ``ttl``, and once it is older
    than ``ttl`` starts a re-read meanwhile, for the next caller. A process under steady load thus sees
    a change made elsewhere (another process's admin edit, which sends it no signal) about ``ttl`` after
    it was read, and never more than ``2 * ttl``. A value older than that (nobody asked for a while),
    none yet, or one dropped by ``forget`` (a change in this process) is waited for; ``keep_fresh``
    keeps it from growing that old. One read at a time: every caller that waits meanwhile waits for
    the same one."""

    def __init__(
        self,
        read: Callable[[], Awaitable[T]],
        *,
        ttl: float = 2.0,
        name: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self.name = name  # for the log, when a re-read fails
        self._load = read
        self._value: T | None = None
        self._read_at = float("-inf")
        self._generation = 0
        self._reading: asyncio.Task[T] | None = None

    @property
    def value(self) -> T | None:
        """The value as last read (None before the first read), whatever its age."""
        return self._value

    def forget(self, *_args: object, **_kwargs: object) -> None:
        """The value changed (a signal's receiver): the next caller waits for a read begun after now."""
        self._generation += 1
        self._read_at = float("-inf")
        self._reading = None

    async def current(self) -> T:
        age = self._clock() - self._read_at
        if age < self.ttl:
            return self._value  # type: ignore[return-value]  # read at least once: _read_at is set
        if age < 2 * self.ttl:
            self._read()
            return self._value  # type: ignore[return-value]
        return await self.read_again()

    async def keep_fresh(self) -> None:
        """Reads the value again whenever it is ``ttl`` old, until cancelled: the server runs this
        for the values every request needs (project/asgi.py's lifespan), so that no caller waits
        for a read after a quiet spell. Without it, the first request after more than ``2 * ttl``
        with no caller waited for a read on the database thread, behind the runs' event logs: 160 ms
        with 500 replies streaming, the p99 of /agui/info (bench/stream.py --operators, issue #27
        item 5). A failed read is logged (``_log_failure``) and tried again ``ttl`` later."""
        while True:
            due = self._read_at + self.ttl - self._clock()
            if due > 0:
                await asyncio.sleep(due)
                continue
            try:
                await asyncio.shield(self._read())
            except Exception:
                await asyncio.sleep(self.ttl)

    async def read_again(self) -> T:
        """Waits for a read: the one in flight, or a new one."""
        return await asyncio.shield(self._read())

    def _read(self) -> asyncio.Task[T]:
        loop = asyncio.get_running_loop()
        reading = self._reading
        if reading is None or reading.done() or reading.get_loop() is not loop:
            # An empty context: the read belongs to no request, and outlives the one that began it.
            reading = loop.create_task(self._read_now(self._generation), context=contextvars.Context())
            reading.add_done_callback(self._log_failure)
            self._reading = reading
        return reading

    async def _read_now(self, generation: int) -> T:
        value = await self._load()
        if generation == self._generation:  # kept only if nothing changed meanwhile: the read may predate it
            self._value, self._read_at = value, self._clock()
        return value

    def _log_failure(self, read: asyncio.Task[T]) -> None:
        # The value in hand stays, and the next caller past the TTL tries again; a caller waiting for
        # this read gets the error too.
        if not read.cancelled() and read.exception() is not None:
            log.error("could not read %s again", self.name, exc_info=read.exception())
