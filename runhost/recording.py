"""A run's end made durable: its record (finished, or waiting on its checkpoint) written after its
event log, and only then its terminal event let out, so a client that saw RUN_FINISHED can rely on
the run and its events being stored, in whichever process it asks next. A run this process lost
to a takeover, or handed over at shutdown, is not recorded here (``record_run``)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from orchestrator.events import Outcome
from orchestrator.waits import Checkpoint
from runhost.execute import RunEnd
from runhost.registry import LiveRun
from runhost.surface import RunSurface
from threads.dbthread import on_db_thread, on_db_thread_shared
from threads.models import Run
from threads.services.runs import run_finish
from threads.takeover import RunTakenOver, run_release
from threads.waits import run_wait

log = logging.getLogger(__name__)

_STATUS = {
    Outcome.SUCCESS: Run.Status.SUCCEEDED,
    Outcome.ERROR: Run.Status.FAILED,
    Outcome.CANCELLED: Run.Status.CANCELLED,
    Outcome.PAUSED: Run.Status.PAUSED,
    Outcome.INTERRUPTED: Run.Status.INTERRUPTED,
}


async def record_end(
    run_pk: uuid.UUID,
    thread_pk: uuid.UUID,
    surface: RunSurface,
    outcome: Outcome,
    checkpoint: Checkpoint | None,
    client_tools: list[dict[str, Any]],
    error: str,
    takeovers: int = 0,
) -> bool:
    """Flushes the run's events, stores its end (``checkpoint``: it waits), closes its stream.
    True when a message queued while it worked is left for the next run to take. ``takeovers``: how
    often the run had been taken over when this process took it; a run taken over since is not
    recorded here (it is the other process's), and its stream here ends without a terminal event: its
    clients reattach and follow the run where it goes on."""
    failed = ""
    queued = moved = False
    try:
        flushed = await surface.flush()
        if checkpoint is not None:
            await on_db_thread(
                run_wait,
                run_id=run_pk,
                checkpoint=checkpoint,
                client_tools=client_tools,
                event_count=flushed.event_count,
                state=flushed.state,
                takeovers=takeovers,
            )
        else:
            queued = await on_db_thread_shared(
                run_finish,
                run_id=run_pk,
                thread_id=thread_pk,
                status=_STATUS[outcome],
                outcome=outcome.value,
                error=error,
                event_count=flushed.event_count,
                state=flushed.state,
                takeovers=takeovers,
            )
    except RunTakenOver:
        log.error("run %s was taken over by another process: its end is that process's to record", run_pk)
        moved = True
    except Exception:
        log.exception("could not record the end of run %s", run_pk)
        failed = "the server could not record the run"
    finally:
        surface.close(failed=failed, moved=moved)
    return queued


async def record_run(
    live: LiveRun, thread_pk: uuid.UUID, surface: RunSurface, end: RunEnd, client_tools: list[dict[str, Any]]
) -> bool:
    """Makes a run of this process durable (``record_end``), then lets its terminal event out. A run
    another process took over is that process's to record: this one only ends its stream; a run
    handed over at shutdown has what it published flushed and its lease let go. True when a message
    queued while it worked is left for the next run to take."""
    if live.lost:
        surface.close(moved=True)  # it goes on in the process that took it over: its clients follow it there
        return False
    if live.handing_over:
        try:
            await surface.flush()  # what it published before the hand-over, and nothing after
            await on_db_thread(run_release, run_id=live.run_pk, takeovers=live.takeovers)
        except Exception:
            log.exception("could not hand run %s over", live.run_pk)  # its lease lapses anyway
        finally:
            surface.close()
        return False
    return await record_end(
        live.run_pk, thread_pk, surface, end.outcome, end.checkpoint, client_tools, end.error, live.takeovers
    )
