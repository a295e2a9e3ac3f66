"""threads/fastsql.py's statements, built once, against the ORM's answers (on PostgreSQL too:
tests/threads/test_event_log_postgres.py)."""

from __future__ import annotations

import uuid

import pytest

from threads import fastsql
from threads.models import QueuedMessage, Run, Thread


@pytest.fixture
def thread(coder):
    return Thread.objects.create(agui_thread_id="t-fast", agent=coder)


def test_exists_answers_as_the_orm_does(thread):
    other = Thread.objects.create(agui_thread_id="t-other", agent=thread.agent)
    Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.WAITING)
    QueuedMessage.objects.create(thread=other, message_id="m1", agui_run_id="r2", body={"id": "m1"}, content="hi")
    for model, where in [
        (Run, {"thread": thread.pk, "status": Run.Status.WAITING}),
        (Run, {"thread": thread.pk, "status": Run.Status.RUNNING}),
        (Run, {"thread": other.pk, "status": Run.Status.WAITING}),
        (Run, {"thread": uuid.uuid4(), "agui_run_id": "r1"}),
        (QueuedMessage, {"thread": other.pk, "status": QueuedMessage.Status.QUEUED}),
        (QueuedMessage, {"thread": thread.pk, "status": QueuedMessage.Status.QUEUED}),
        (QueuedMessage, {"thread": other.pk, "status": QueuedMessage.Status.READ}),
    ]:
        assert fastsql.exists(model, **where) == model.objects.filter(**where).exists(), (model, where)
    assert fastsql.exists(Run, thread=thread.pk, status=Run.Status.WAITING)
    assert fastsql.exists(QueuedMessage, thread=other.pk, status=QueuedMessage.Status.QUEUED)
