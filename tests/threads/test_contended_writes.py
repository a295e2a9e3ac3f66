"""A request whose writes keep losing database races is told to send itself again (issue #23).

PostgreSQL itself fails the writes here: a trigger raises the SQLSTATE of a deadlock (40P01) or of
a serialization failure (40001) on the row the request writes, as the database does to the loser
of a real race, and counts how often it was asked. The server tries a few times, stores nothing,
and ends the stream with ``RUN_ERROR`` code ``retry``, never ``internal``; sent again once the
database lets it, the same request goes through.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.procs import ServerProcess
from tests.sse import post_run

pytestmark = pytest.mark.services
ATTEMPTS = 4  # threads/locking.py

# Fails every write of the row it is on with ``sqlstate``, counting the attempts in a sequence
# (a sequence is not rolled back with the transaction that used it).
TRIGGER = """
CREATE SEQUENCE {name}_attempts;
CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('{name}_attempts');
    RAISE EXCEPTION 'lost a race (a test trigger)' USING ERRCODE = '{sqlstate}';
END $$;
CREATE TRIGGER {name} BEFORE {event} ON {table} FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {name}();
"""


@pytest.fixture
def server(tmp_path: Path, postgres_url: str) -> Iterator[tuple[ServerProcess, FakeAnthropic]]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, "DATABASE_URL": postgres_url}
        process = ServerProcess(data_dir=tmp_path / "data", workspace=workspace, env=env)
        (tmp_path / "data").mkdir()
        try:
            yield process.start(), fake
        finally:
            process.kill()


def _sql(server: ServerProcess, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(server.env["DATABASE_URL"], autocommit=True) as db:
        cursor = db.execute(sql)
        return cursor.fetchall() if cursor.description else []


def _api_token(server: ServerProcess) -> str:
    """A REST token of an operator with every permission (a superuser)."""
    created = server.manage("createsuperuser", "--noinput", "--username", "op", "--email", "op@example.com")
    assert created.returncode == 0, created.stderr
    token = server.manage("drf_create_token", "op")
    assert token.returncode == 0, token.stderr
    return token.stdout.split()[2]


def test_a_message_and_an_answer_that_keep_losing_races_are_refused_with_retry(server) -> None:
    process, fake = server
    fake.script([tool_turn("file_write", {"path": "a.txt", "content": "x\n"}, id="toolu_c"), text_turn(["ok"])])
    first = user("write it", "u1")
    asked = post_run(process.url, "coder", v1(run_input("t-busy", "r1", first)), token=process.token)
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    _sql(
        process,
        TRIGGER.format(
            name="lose_message",
            sqlstate="40P01",
            event="INSERT",
            table="threads_message",
            when="NEW.message_id = 'u2'",
        )
        + TRIGGER.format(
            name="lose_answer",
            sqlstate="40001",
            event="UPDATE",
            table="threads_approval",
            when="NEW.decision = 'approved'",
        ),
    )

    message = v1(run_input("t-busy", "r2", first, user("and this", "u2")))
    refused = post_run(process.url, "coder", message, token=process.token)
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"]
    assert refused.events[-1]["code"] == "retry" and "send it again" in refused.events[-1]["message"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    answer = {**v1(run_input("t-busy", "r1")), "resume": resume}
    unrecorded = post_run(process.url, "coder", answer, token=process.token)
    assert unrecorded.types == ["RUN_STARTED", "RUN_ERROR"]
    assert unrecorded.events[-1]["code"] == "retry"
    assert _sql(process, "SELECT last_value FROM lose_message_attempts") == [(ATTEMPTS,)]
    assert _sql(process, "SELECT last_value FROM lose_answer_attempts") == [(ATTEMPTS,)]
    # The REST answer is told the same, as a 503.
    api = _api_token(process)
    rest = httpx.post(
        f"{process.url}/api/approvals/{interrupt['id']}/answer",
        json={"approved": True},
        headers={"Authorization": f"Token {api}"},
        timeout=30,
    )
    assert rest.status_code == 503 and rest.headers["Retry-After"] == "1"
    assert rest.json()["error"]["code"] == "retry"
    assert _sql(process, "SELECT last_value FROM lose_answer_attempts") == [(2 * ATTEMPTS,)]
    # Nothing of either was kept: the question still waits, the message is not in the transcript.
    assert _sql(process, "SELECT decision FROM threads_approval") == [("pending",)]
    assert _sql(process, "SELECT status FROM threads_run") == [("waiting",)]
    assert _sql(process, "SELECT message_id FROM threads_message ORDER BY position")[-1] != ("u2",)

    _sql(process, "DROP TRIGGER lose_message ON threads_message; DROP TRIGGER lose_answer ON threads_approval")
    resent = post_run(process.url, "coder", message, token=process.token)
    assert resent.types[-1] == "RUN_FINISHED", resent.events[-1]
    assert _sql(process, "SELECT count(*) FROM threads_message WHERE message_id = 'u2'") == [(1,)]
    assert _sql(process, "SELECT decision FROM threads_approval") == [("superseded",)]
