"""The one order in which a thread's rows are locked, and the retry of a transaction that lost a race.

PostgreSQL breaks a deadlock by failing one of the transactions in it, so two writers that lock
the same rows in opposite orders lose one request at random: a new message (which locked the
thread, then its waiting run) racing an approval's answer (which locked the run, then inserted the
run it goes on in, which takes a share lock on the thread) was lost with ``RUN_ERROR internal``
(issue #23). So:

1. A transaction that locks or writes several of a thread's rows, and may meet another such
   transaction of the same thread, locks the Thread row first (``thread_lock``): opening a run,
   answering or claiming a waiting run, a run ending as waiting or finished. Two of them queue on
   that row and never hold part of each other's set.
2. After the thread, and in the writes of a run in flight that take no thread lock (its session
   commits, its sub-agents' commits, reading its queued messages, a cancel, healing a dead run),
   rows are taken in this order, skipping any not needed and never going back to an earlier one:
   the thread's Runs (the waiting one, then those being healed), their SubAgentTasks, the thread's
   QueuedMessages, the runs' Approvals, the thread's Session. A row already held may be written
   again at any point; new rows (Messages, RunEvents, a new Run) are inserted last.
3. Locks are ``FOR NO KEY UPDATE``: nothing here changes a key or deletes a row, and a plain
   ``FOR UPDATE`` also blocks every insert of a row that refers to the locked one (a Message or a
   Run of the thread), which is how the deadlock above closed its cycle.

What the order cannot rule out (a row an index scan locks in its own order, an operator's edit in
the admin, a stricter isolation level) is retried: ``again_after_a_race`` runs the transaction
again after a deadlock or a serialization failure, a few times, and then raises ``Contended`` so
the request is answered with an error that tells its sender to send it again, never ``internal``.
Each write that locks several rows carries it.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, OperationalError, connection

from threads.models import Thread

log = logging.getLogger(__name__)

# SQLSTATEs of a transaction PostgreSQL rolled back to let another go on: running it again is safe.
_TRANSIENT = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
ATTEMPTS = 4


class Contended(Exception):
    """The transaction lost a race ``ATTEMPTS`` times in a row; nothing of it was written.
    The request that asked for it should be sent again (RUN_ERROR code ``retry``)."""


def thread_lock(**lookup: Any) -> uuid.UUID | None:
    """Locks the row of the thread ``lookup`` names (step 1 above) and returns its pk; None when
    there is no such thread. Inside a transaction."""
    found = list(
        Thread.objects.select_for_update(of=("self",), no_key=True)
        .filter(**lookup)
        .order_by()
        .values_list("pk", flat=True)[:1]
    )
    return found[0] if found else None


def _transient(exc: OperationalError) -> bool:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) in _TRANSIENT or getattr(cause, "pgcode", None) in _TRANSIENT


def again_after_a_race[**P, R](write: Callable[P, R]) -> Callable[P, R]:
    """Runs ``write`` (a function that opens its own transaction) again after a deadlock or a
    serialization failure, up to ``ATTEMPTS`` times in all, then raises ``Contended``. Inside an
    outer transaction nothing is retried: the outer one has failed as a whole, and only its owner
    can run it again."""
    return _retrying(write, integrity=False)


def again_after_a_race_to_create[**P, R](write: Callable[P, R]) -> Callable[P, R]:
    """``again_after_a_race``, and once more after an IntegrityError: two first requests of one new
    thread both insert it, and the loser's second attempt finds it and takes the path for an
    existing one."""
    return _retrying(write, integrity=True)


def _retrying[**P, R](write: Callable[P, R], *, integrity: bool) -> Callable[P, R]:
    @functools.wraps(write)
    def attempts(*args: P.args, **kwargs: P.kwargs) -> R:
        integrity_retried, lost = not integrity, 0
        while True:
            try:
                return write(*args, **kwargs)
            except IntegrityError:
                if integrity_retried or connection.in_atomic_block:
                    raise
                integrity_retried = True
            except OperationalError as exc:
                if not _transient(exc) or connection.in_atomic_block:
                    raise
                lost += 1
                if lost == ATTEMPTS:
                    raise Contended(f"{write.__name__} lost a database race {ATTEMPTS} times") from exc
                # No pause: PostgreSQL failed this side so the other could go on, and the next
                # attempt waits for it at the thread's row (sleeping would stall the process's one
                # database thread, threads/dbthread.py).
                log.info("%s lost a database race (%s); attempt %d of %d", write.__name__, exc, lost + 1, ATTEMPTS)

    return attempts
