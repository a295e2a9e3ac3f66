"""On PostgreSQL, the writes of a run's life go to the server as one query of several statements
(threads/fastsql.py execute): one round trip each, with the same rows and the same errors as one
statement at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.procs import postgres_env, script_report

pytestmark = pytest.mark.services

SCRIPT = """
import json, uuid
import django
django.setup()
from django.db import IntegrityError, connection, transaction
from orchestrator.events import AssistantMessage
from orchestrator.providers.base import TokenCount
from threads import fastsql
from threads.models import Message, QueuedMessage, Run, Session, Thread
from threads.services.runs import run_finish, run_open
from threads.services.sessions import session_commit
from threads.services.transcript import messages_append

sent = []
def counting(execute, sql, params, many, context):
    sent.append(sql)
    return execute(sql, params, many, context)

def round_trips(func, **kwargs):
    sent.clear()
    with connection.execute_wrapper(counting):
        result = func(**kwargs)
    return result, len(sent)

opened, open_trips = round_trips(
    run_open, agent_name="coder", agui_thread_id="t-pg", agui_run_id="r1",
    new_user_message={"id": "m-user", "role": "user", "content": "hi"}, protocol_version="1.0", live_run_ids=set(),
)
thread, session, run = opened.thread, opened.session, opened.run
_, commit_trips = round_trips(
    session_commit, session_id=session.pk, thread_id=thread.pk, run_id=run.pk,
    turns=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    messages=[
        AssistantMessage(message_id="m-a1", content="hello", tool_calls=()),
        AssistantMessage(message_id="m-a2", content="more", tool_calls=()),
    ],
    usage=TokenCount(input_tokens=7, output_tokens=5),
)
QueuedMessage.objects.create(thread=thread, message_id="m-q", agui_run_id="r2", body={"id": "m-q"}, content="later")
queued, finish_trips = round_trips(
    run_finish, run_id=run.pk, thread_id=thread.pk, status="succeeded", outcome="success", error="",
    event_count=3, state={"k": 1},
)
run.refresh_from_db(); session.refresh_from_db(); thread.refresh_from_db()

# The same writes in a shared commit (threads/dbthread.py), beside another write: they make no
# savepoint of their own there, each of whose statements would be another round trip.
from threads.dbthread import _together

def in_a_group(write, **kwargs):
    (ok, result), _ = _together([(write, kwargs), (lambda: None, {})])
    assert ok, result
    return result

grouped_open, grouped_open_trips = round_trips(
    in_a_group, write=run_open, agent_name="coder", agui_thread_id="t-pg-grouped", agui_run_id="r1",
    new_user_message={"id": "m-user-2", "role": "user", "content": "hi"}, protocol_version="1.0", live_run_ids=set(),
)
_, grouped_commit_trips = round_trips(
    in_a_group, write=session_commit, session_id=grouped_open.session.pk, thread_id=grouped_open.thread.pk,
    run_id=grouped_open.run.pk, turns=[{"role": "user", "content": "hi"}], messages=[], usage=TokenCount(),
)
_, grouped_finish_trips = round_trips(
    in_a_group, write=run_finish, run_id=grouped_open.run.pk, thread_id=grouped_open.thread.pk, status="succeeded",
    outcome="success", error="", event_count=3, state={},
)

# A duplicate in the middle: it raises as alone, the statement after it does not run, and the
# transaction's rollback keeps nothing of the three.
before = Message.objects.count()
duplicate = None
try:
    with transaction.atomic():
        fastsql.execute(*(
            fastsql.insert_statement(Message(thread=thread, position=at, message_id=m, role="user", body={"id": m}))
            for at, m in ((50, "m-x"), (0, "m-y"), (51, "m-z"))
        ))
except IntegrityError as exc:
    duplicate = type(exc).__name__
print(json.dumps({
    "trips": [open_trips, commit_trips, finish_trips],
    "grouped_trips": [grouped_open_trips, grouped_commit_trips, grouped_finish_trips],
    "positions": list(Message.objects.filter(thread=thread).order_by("position").values_list("position", "message_id")),
    "tokens": [run.input_tokens, run.output_tokens, session.input_tokens, session.output_tokens],
    "turns": len(session.turns),
    "finished": [run.status, run.event_count, thread.state, queued],
    "duplicate": duplicate,
    "kept": Message.objects.count() - before,
}))
"""


def test_a_runs_writes_take_one_round_trip_each_on_postgresql(postgres_url, tmp_path: Path):
    report = script_report(SCRIPT, postgres_env(postgres_url, tmp_path))
    # Opening a new thread: the agent, the thread's row, then its four rows at once. Committing the
    # session (two counters, the session, two messages) and finishing (thread, run, queue) are one each.
    assert report["trips"] == [3, 1, 1]
    assert report["grouped_trips"] == [3, 1, 1]  # with a savepoint each, they were [5, 3, 3]
    assert report["positions"] == [[0, "m-user"], [1, "m-a1"], [2, "m-a2"]]
    assert report["tokens"] == [7, 5, 7, 5]
    assert report["turns"] == 2
    assert report["finished"] == ["succeeded", 3, {"k": 1}, True]
    assert report["duplicate"] == "IntegrityError"
    assert report["kept"] == 0


READS = """
import json
import django
django.setup()
from tests.fastsql_reads import fastsql_reads_against_the_orm
report = fastsql_reads_against_the_orm()
report["agent_values"] = {name: [str(value), kind] for name, value, kind in report["agent_values"]}
print(json.dumps(report, default=str))
"""


def test_first_reads_a_row_as_the_orm_does_on_postgresql(postgres_url, tmp_path: Path):
    report = script_report(READS, postgres_env(postgres_url, tmp_path))
    assert report["agent"] and report["thread"], report
    values = report["agent_values"]
    assert values["mcp_servers"] == ["['files', 'web']", "list"]
    assert values["budget_daily_usd"] == ["1.25", "Decimal"]
    assert values["environment_block"] == ["False", "bool"]
    assert report["disabled"] is None and report["missing"] is None
    assert report["owner"] == [True, True, True]
    assert report["spend"] == report["spend_expected"]
