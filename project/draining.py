"""The server process's end: it drains before it stops (issue #45 item 4; runhost/drain.py).

uvicorn stops listening at once on SIGTERM, waits for its connections, then tells the application
(the lifespan's shutdown). ``DrainingServer`` drains first: on the first SIGTERM (or SIGINT) the run
host stops taking runs (new ones get ``503 draining`` with Retry-After) and hands its running runs
over at their next step boundary, within SERVER_DRAIN_SECONDS, while the process goes on serving
reads and reattaches; then uvicorn's own shutdown follows. A second signal stops it as uvicorn would.

``manage.py serve --workers N`` runs N of them under ``Workers``, uvicorn's supervisor with these
servers. A worker that drains stops listening at once (its siblings hold the port). On SIGHUP the
supervisor replaces its workers one at a time: the new one started and ready, then the old one
drained and gone, then the next (uvicorn's ``restart_all``, with draining workers).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn
from django.conf import settings
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess, Process

log = logging.getLogger(__name__)

# How long connections left after a drain (reattaches following runs of other processes) may stay
# before they are closed: their clients reattach elsewhere. uvicorn's own wait, once drained.
AFTER_DRAIN_SECONDS = 3
# How long a new worker may take to start (Django, the MCP servers) before a rolling restart gives up
# and keeps the old one: a busy machine takes more than uvicorn's 5 seconds.
READY_SECONDS = 60


class DrainingServer(uvicorn.Server):
    """uvicorn's server that drains on its first SIGTERM or SIGINT before it stops."""

    def __init__(self, config: uvicorn.Config, *, stop_listening: bool = False) -> None:
        super().__init__(config)
        self.stop_listening = stop_listening  # at the drain's start: a worker's siblings serve the port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None
        self._drain_asked = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        loop = self._loop
        drains = sig in (signal.SIGTERM, signal.SIGINT) and self.started and not self.should_exit
        if not drains or self._drain_asked or loop is None:
            super().handle_exit(sig, frame)  # before start-up, or a second signal: stop now
            return
        self._drain_asked = True
        self._captured_signals.append(sig)  # uvicorn raises it again once stopped, as it would have
        loop.call_soon_threadsafe(self._begin_drain)

    def _begin_drain(self) -> None:
        self._draining = asyncio.get_running_loop().create_task(self._drain_then_stop(), name="drain")

    async def _drain_then_stop(self) -> None:
        from runhost.host import HOST

        log.warning("draining: new runs get 503; runs in flight are handed over at their next step")
        if self.stop_listening:
            for server in getattr(self, "servers", []):
                server.close()
        try:
            await HOST.drain_for_exit(settings.SERVER_DRAIN_SECONDS)
        except Exception:
            log.exception("the drain failed; stopping anyway")
        finally:
            self.should_exit = True


class DrainingProcess(Process):
    """A worker process of ``Workers``: a draining server that stops listening as it drains."""

    @property
    def server(self) -> uvicorn.Server:
        if self._server is None:
            self._server = DrainingServer(self.config, stop_listening=True)
        return self._server


class Workers(Multiprocess):
    """uvicorn's supervisor (one port, N workers; SIGHUP restarts them one at a time; a dead one is
    replaced) with draining workers."""

    def _new(self) -> DrainingProcess:
        process = DrainingProcess(self.config, self.sockets)
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes = [self._new() for _ in range(self.processes_num)]

    def restart_all(self) -> None:
        """Each worker in turn: its replacement started and ready, then it drains and exits."""
        log.warning("SIGHUP: restarting %d workers one at a time", len(self.processes))
        for index, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self._new()
            if not new.wait_until_ready(max(self.config.timeout_worker_healthcheck, READY_SECONDS), self.should_exit):
                new.kill()
                new.join()
                log.error("worker [%s] was not ready in time: [%s] is kept, the restart stops", new.pid, old.pid)
                return
            old.terminate()  # SIGTERM: it drains (its runs are handed over), then exits
            old.join()
            self.processes[index] = new

    def handle_ttin(self) -> None:
        """SIGTTIN: one more worker (SIGTTOU, one fewer, drains it as any worker stops)."""
        self.processes_num += 1
        self.processes.append(self._new())

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        for index, process in enumerate(self.processes):
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                log.error("worker [%s] failed to start: the server stops", process.pid)
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            log.warning("worker [%s] died: starting another", process.pid)
            self.processes[index] = self._new()
