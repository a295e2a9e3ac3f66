"""What the run host asks of a surface (agui/runs.py): where one run's events go, and what it knows
of the run it streams."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from agents.models import Agent
from orchestrator.events import RunListener
from orchestrator.providers.base import ModelInfo
from orchestrator.waits import Checkpoint
from runhost.registry import LiveStream
from threads.models import Session, Thread
from threads.services.runs import Hydrate


@dataclass(slots=True)
class RunContext:
    """What a surface needs to know of a run it streams."""

    agui_thread_id: str
    agui_run_id: str
    run_pk: uuid.UUID
    thread: Thread
    session: Session
    agent: Agent
    model: ModelInfo
    # Calls announced in an earlier run of this agent run (before it waited): not opened again.
    announced_calls: frozenset[str] = frozenset()
    # How often the run had been taken over when this process got it: its log's writes are fenced by it.
    takeovers: int = 0


@dataclass(slots=True, frozen=True)
class ContinuedLog:
    """The log a run taken over from a dead process goes on in (threads/takeover.py): its events
    come after seq ``after``; ``logged`` are the events of the log that open or close parts, so that
    what they left open is closed first."""

    after: int
    logged: tuple[dict[str, Any], ...]
    count: int  # how many events the log holds (Run.event_count counts them, gaps aside)
    # This takeover as the run's history records it (threads/takeover.py): shown to its clients.
    takeover: dict[str, Any] | None = None


@dataclass(slots=True, frozen=True)
class Flushed:
    event_count: int
    state: dict[str, Any]


class RunSurface(Protocol):
    """Where one run's events go (agui/runs.py streams them as AG-UI)."""

    def attach(self, context: RunContext) -> RunListener:
        """The run is open: the listener that hears it."""
        ...

    @property
    def stream(self) -> LiveStream:
        """The run's events as they are made, for a reattach in this process."""
        ...

    async def waiting(self, checkpoint: Checkpoint) -> None:
        """The run ended on calls that need answers: end the stream on them."""
        ...

    async def flush(self) -> Flushed:
        """Every event is durable; the terminal one is not yet let out."""
        ...

    def close(self, *, failed: str = "", moved: bool = False) -> None:
        """Lets the terminal event out; with ``failed``, the run could not be recorded and
        the stream ends with an error instead; with ``moved``, another process took the run over
        and the stream ends without a terminal event, for its clients to reattach."""
        ...

    def refused(self, code: str, message: str) -> None:
        """The request opened no run: end the stream with this error."""
        ...

    async def hydrate(self, opened: Hydrate) -> None:
        """Nothing to run: the thread as it stands (and any questions it waits on), then the end."""
        ...

    def queued(self, display: str) -> None:
        """The request's message was queued for the run in flight; this stream will follow it."""
        ...

    async def relay(self, run_pk: uuid.UUID, *, request_id: str, from_start: bool) -> bool:
        """Follows another run's events into this stream, until that run ends: all of them
        (``from_start``: the run the queued message started), or those from where the run read
        the message ``request_id``. True when this stream ended with it; False when the run ended
        without reading the message (nothing of it was shown)."""
        ...


class BackgroundSurfaces(Protocol):
    def __call__(
        self, thread: Thread, agui_run_id: str, protocol_version: str, *, continues: ContinuedLog | None = None
    ) -> RunSurface:
        """The surface of a run with nobody's request to stream into (an answer from the admin
        or the API, a deadline, a queued message that starts the next run, a run taken over): its
        log; with ``continues``, the log of the run it goes on, after what it holds."""
        ...
