"""The "yes, always" answers a session remembers, so the same kind of call is not asked again."""

from __future__ import annotations

import uuid

from django.db import transaction

from threads.models import Session


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
