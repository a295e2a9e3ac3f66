"""The "yes, always" answers a session remembers, so the same kind of call is not asked again, and the
hosts an agent's bash may reach from then on (issue #47)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from django.db import transaction

from agents.network import allow_always
from orchestrator.tools.egress import HostPattern
from threads.models import Session, Thread


def session_approved_always(*, session_id: uuid.UUID) -> set[str]:
    keys = Session.objects.filter(pk=session_id).values_list("approved_always", flat=True).first()
    return set(keys or [])


@transaction.atomic
def session_remember_approval(*, thread_id: uuid.UUID, key: str) -> None:
    """Remembers a "yes, always" for the thread's session, whoever goes on with the run."""
    session = Session.objects.select_for_update(no_key=True).get(thread_id=thread_id)
    if key not in session.approved_always:
        session.approved_always = [*session.approved_always, key]
        session.save(update_fields=["approved_always"])


@dataclass(slots=True)
class AnswersRecorded:
    """What the answers to a waiting run wrote: how many, the "yes, always" keys the session is to
    keep, and the hosts asked for through request_network_access that were approved "always"."""

    count: int = 0
    always: list[str] = field(default_factory=list)
    hosts: list[HostPattern] = field(default_factory=list)

    def remember(self, thread_id: uuid.UUID) -> None:
        # A "yes, always" is kept for the session at once, whoever goes on with the run; the
        # session's row is the last a writer locks (threads/locking.py), so after every approval.
        for key in self.always:
            session_remember_approval(thread_id=thread_id, key=key)
        if self.hosts:  # and a host asked for "always" joins the agent's own list
            agent_id = Thread.objects.filter(pk=thread_id).values_list("agent_id", flat=True).first()
            for pattern in self.hosts:
                if agent_id is not None:
                    allow_always(agent_id, pattern)
