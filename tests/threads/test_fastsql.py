"""threads/fastsql.py's statements, built once, against the ORM's answers (on PostgreSQL too:
tests/threads/test_event_log_postgres.py)."""

from __future__ import annotations

import uuid
from decimal import Decimal

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


def test_execute_runs_every_statement_in_order_and_returns_the_last_ones_rows(thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.RUNNING)
    rows = fastsql.execute(
        fastsql.update_statement(Run, run.pk, setting={"status": Run.Status.WAITING}, adding={"input_tokens": 3}),
        fastsql.update_statement(Run, run.pk, setting={}, adding={"input_tokens": 4}),
        fastsql.exists_statement(Run, thread=thread.pk, status=Run.Status.WAITING),
    )
    run.refresh_from_db()
    assert (run.status, run.input_tokens, rows) == (Run.Status.WAITING, 7, [(1,)])
    assert fastsql.execute(fastsql.exists_statement(Run, thread=thread.pk, status=Run.Status.RUNNING)) == []
    assert fastsql.execute() == []


def test_appended_messages_follow_the_last_stored_position(thread):
    from threads.models import Message
    from threads.services.transcript import messages_append

    messages_append(thread_id=thread.pk, bodies=[{"id": "m1", "role": "user", "content": "a"}])
    messages_append(
        thread_id=thread.pk,
        bodies=[{"id": "m2", "role": "assistant", "content": "b"}, {"id": "m3", "role": "tool", "content": "c"}],
    )
    stored = list(
        Message.objects.filter(thread=thread).order_by("position").values_list("position", "message_id", "role")
    )
    assert stored == [(0, "m1", "user"), (1, "m2", "assistant"), (2, "m3", "tool")]
    assert Message.objects.get(message_id="m3").body == {"id": "m3", "role": "tool", "content": "c"}


def test_first_reads_a_row_as_the_orm_does(transactional_db):
    from tests.fastsql_reads import fastsql_reads_against_the_orm

    report = fastsql_reads_against_the_orm()
    assert report["agent"] and report["thread"], report
    values = dict((name, (value, kind)) for name, value, kind in report["agent_values"])
    # Converted as the ORM converts them: JSON parsed, a decimal with its places, SQLite's 0 as False.
    assert values["mcp_servers"] == (["files", "web"], "list")
    assert values["budget_daily_usd"] == (Decimal("1.25"), "Decimal")
    assert values["environment_block"] == (False, "bool") and values["enabled"] == (True, "bool")
    assert report["disabled"] is None and report["missing"] is None
    assert report["owner"] == [True, True, True]
    # None is IS NULL, not "= NULL"; the order is the lowest id first; no row is None.
    assert report["spend"] == report["spend_expected"]
