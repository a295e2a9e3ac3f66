"""A new message racing an approval's answer, on two server processes sharing PostgreSQL (issue #23).

Both requests lock the thread's rows: the message (``run_open``) to store itself and supersede
the question, the answer (``wait_answer``) to record itself and claim the waiting run. Taken in
opposite orders, PostgreSQL breaks the deadlock by failing one of them, and the message was lost
with ``RUN_ERROR internal``. Whichever wins now, the message is stored once and nobody is told
``internal``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.procs import ServerProcess, server_pair
from tests.sse import Stream, post_run

pytestmark = pytest.mark.services
RACES = 50


@dataclass
class Pair:
    fake: FakeAnthropic
    a: ServerProcess  # takes the new messages
    b: ServerProcess  # takes the answers
    database: str

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database, autocommit=True) as db:
            return db.execute(sql, args).fetchall()


@pytest.fixture
def pair(tmp_path: Path, postgres_url: str, redis_url: str) -> Iterator[Pair]:
    env = {
        "DATABASE_URL": postgres_url,
        "REDIS_URL": redis_url,
        "RUN_LEASE_SECONDS": "1.5",
        "WAIT_SWEEP_SECONDS": "0.2",
    }
    with server_pair(tmp_path, env) as (fake, a, b):
        yield Pair(fake, a, b, postgres_url)


def _race(pair: Pair, number: int) -> tuple[Stream, Stream]:
    """One thread whose run waits for the approval of a file_write; then, at once, a new message
    on A and the answer on B. The message is held back a little more or less each time, so the
    races cover the moments where each request holds one lock and wants the other's."""
    thread_id, marker = f"t-race-{number}", f"race {number}:"
    pair.fake.script_for(
        marker,
        [
            tool_turn("file_write", {"path": f"r{number}.txt", "content": "x\n"}, id=f"toolu_r{number}"),
            *[text_turn(["ok"]) for _ in range(3)],
        ],
    )
    first = user(f"{marker} write it", "u1")
    asked = post_run(pair.a.url, "coder", v1(run_input(thread_id, "r1", first)), token=pair.a.token)
    assert asked.types[-1] == "RUN_FINISHED", asked.events[-1]
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    barrier = threading.Barrier(2)
    results: dict[str, Stream] = {}
    lead = (number % 7) * 0.002

    def send_message() -> None:
        barrier.wait()
        time.sleep(lead)
        body = v1(run_input(thread_id, "r2", first, user("and then this", "u2")))
        results["message"] = post_run(pair.a.url, "coder", body, token=pair.a.token)

    def send_answer() -> None:
        barrier.wait()
        time.sleep(0.006 - lead if lead < 0.006 else 0)
        body = {**v1(run_input(thread_id, "r1")), "resume": resume}
        results["answer"] = post_run(pair.b.url, "coder", body, token=pair.b.token)

    racers = [threading.Thread(target=send_message), threading.Thread(target=send_answer)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    return results["message"], results["answer"]


def _settled(pair: Pair, thread_id: str) -> bool:
    """Nothing runs on the thread and nothing waits in its queue: what the race left is final."""
    ((busy,),) = pair.query(
        "SELECT (SELECT count(*) FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id "
        "        WHERE t.agui_thread_id = %s AND r.status = 'running') + "
        "(SELECT count(*) FROM threads_queuedmessage q JOIN threads_thread t ON t.id = q.thread_id "
        "        WHERE t.agui_thread_id = %s AND q.status = 'queued')",
        thread_id,
        thread_id,
    )
    return busy == 0


def test_a_new_message_racing_an_answer_is_stored_once_whoever_wins(pair: Pair) -> None:
    errors: list[str] = []
    winners: set[str] = set()
    for number in range(RACES):
        message, answer = _race(pair, number)
        # The answer's run executed the approved call, or the message superseded the question first.
        winners.add("answer" if "TOOL_CALL_RESULT" in answer.types else "message")
        for name, stream in (("message", message), ("answer", answer)):
            terminal = stream.events[-1] if stream.events else {"type": f"HTTP {stream.status}"}
            if terminal["type"] != "RUN_FINISHED":
                errors.append(f"race {number}, the {name}: {terminal}")
        thread_id = f"t-race-{number}"
        eventually(lambda t=thread_id: _settled(pair, t), seconds=10, what=f"{thread_id} to settle")
    stored = dict(
        pair.query(
            "SELECT t.agui_thread_id, count(m.id) FROM threads_thread t "
            "LEFT JOIN threads_message m ON m.thread_id = t.id AND m.message_id = 'u2' GROUP BY t.agui_thread_id"
        )
    )
    assert stored == {f"t-race-{n}": 1 for n in range(RACES)}, errors
    assert errors == []
    assert winners == {"answer", "message"}  # the requests did race: each side won some
