"""Threadline on PostgreSQL and Redis, as it runs on several processes.

These tests run whenever the services are reachable. Without them they skip,
loudly; with REQUIRE_SERVICES=1 (as CI sets) a missing service is a failure.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, split_tokens, text_turn
from tests.helpers import eventually, run_input, user, v1
from tests.procs import ServerProcess, server_pair
from tests.restarts import conversation_survives_restart
from tests.sse import parse_frames, post_run

pytestmark = pytest.mark.services


@dataclass
class TwoProcesses:
    fake: FakeAnthropic
    owner: ServerProcess
    other: ServerProcess


@pytest.fixture
def two_processes(tmp_path: Path, postgres_url: str, redis_url: str) -> Iterator[TwoProcesses]:
    """Two server processes on one PostgreSQL database and one Redis, with the model faked."""
    env = {"DATABASE_URL": postgres_url, "REDIS_URL": redis_url, "RUN_LEASE_SECONDS": "1.5"}
    with server_pair(tmp_path, env) as (fake, a, b):
        yield TwoProcesses(fake, a, b)


def test_a_conversation_continues_after_a_restart_on_postgres_and_redis(tmp_path, postgres_url, redis_url):
    conversation_survives_restart(tmp_path, {"DATABASE_URL": postgres_url, "REDIS_URL": redis_url})


def test_another_process_can_follow_a_run_it_does_not_own(two_processes: TwoProcesses) -> None:
    fake, owner, other = two_processes.fake, two_processes.owner, two_processes.other
    slow = text_turn(split_tokens("one two three four five six")).pause(after_events=5)
    fake.script([slow])
    headers = {**owner.headers, "Content-Type": "application/json"}
    body = orjson.dumps(v1(run_input("t-multi", "r1", user("go"))))
    with httpx.stream("POST", f"{owner.url}/agui/coder", content=body, headers=headers, timeout=10) as resp:
        seen = bytearray()
        for chunk in resp.iter_raw():
            seen += chunk
            if seen.count(b"\n\n") >= 3:
                break
    assert slow.paused.wait(10)
    first_three, _ = parse_frames(b"\n\n".join(bytes(seen).split(b"\n\n")[:3]) + b"\n\n")
    with httpx.stream(
        "GET",
        f"{other.url}/agui/coder/threads/t-multi/events",
        headers={**other.headers, "Last-Event-ID": "3"},
        timeout=20,
    ) as follow:
        assert follow.status_code == 200
        rest = bytearray()
        for chunk in follow.iter_raw():
            rest += chunk
            if b"data: " in rest:
                slow.resume.set()
    frames, _ = parse_frames(bytes(rest))
    assert [f.id for f in frames] == list(range(4, 4 + len(frames)))
    assert frames[-1].event["type"] == "RUN_FINISHED"
    text = "".join(
        f.event.get("delta", "") for f in [*first_three, *frames] if f.event["type"] == "TEXT_MESSAGE_CONTENT"
    )
    assert text == "one two three four five six"


def test_a_message_sent_to_another_process_while_a_run_is_busy_starts_the_next_run(
    two_processes: TwoProcesses,
) -> None:
    """The message is queued on B while A's run works; A's run ends without a tool boundary, so A
    hands the message over to the next run as it records its end, and B's request follows that run."""
    fake, owner, other = two_processes.fake, two_processes.owner, two_processes.other
    slow = text_turn(["slow ", "reply"]).pause(after_events=4)
    fake.script([slow, text_turn(["second"])])
    headers = {**owner.headers, "Content-Type": "application/json"}
    body = orjson.dumps(v1(run_input("t-two", "r1", user("one", "u1"))))
    with httpx.stream("POST", f"{owner.url}/agui/coder", content=body, headers=headers, timeout=10) as resp:
        assert resp.status_code == 200
        assert slow.paused.wait(10)
        queued: list[Any] = []
        sender = threading.Thread(
            target=lambda: queued.append(
                post_run(
                    other.url,
                    "coder",
                    v1(run_input("t-two", "r2", user("one", "u1"), user("two", "u2"))),
                    token=other.token,
                    timeout=30,
                )
            )
        )
        sender.start()
        eventually(lambda: _queued_statuses(owner, "t-two") == ["queued"], what="the message to be queued on B")
        slow.resume.set()
        resp.read()
    sender.join(30)
    (followed,) = queued
    assert followed.types[0] == "RUN_STARTED" and followed.types[-1] == "RUN_FINISHED"
    assert followed.events[-1]["runId"] == "r2"
    assert "".join(e.get("delta", "") for e in followed.events if e["type"] == "TEXT_MESSAGE_CONTENT") == "second"
    assert [m["role"] for m in fake.requests[1].body["messages"]] == ["user", "assistant", "user"]
    assert _queued_statuses(owner, "t-two") == ["started"]


def _queued_statuses(server: ServerProcess, thread_id: str) -> list[str]:
    import psycopg

    with psycopg.connect(server.env["DATABASE_URL"], autocommit=True) as db:
        rows = db.execute(
            "SELECT q.status FROM threads_queuedmessage q JOIN threads_thread t ON t.id = q.thread_id "
            "WHERE t.agui_thread_id = %s ORDER BY q.queued_at",
            (thread_id,),
        ).fetchall()
    return [status for (status,) in rows]


def test_a_cancel_sent_to_another_process_stops_the_run(two_processes: TwoProcesses) -> None:
    fake, owner, other = two_processes.fake, two_processes.owner, two_processes.other
    slow = text_turn(split_tokens("a b c d e f g h")).paced(0.2)
    fake.script([slow])
    headers = {**owner.headers, "Content-Type": "application/json"}
    body = orjson.dumps(v1(run_input("t-xcancel", "r1", user("go"))))
    with httpx.stream("POST", f"{owner.url}/agui/coder", content=body, headers=headers, timeout=20) as resp:
        chunks = resp.iter_raw()
        first = next(chunks)
        assert b"RUN_STARTED" in first
        cancelled = httpx.post(
            f"{other.url}/agui/coder/threads/t-xcancel/runs/r1/cancel", headers=other.headers, timeout=10
        )
        assert cancelled.status_code == 202
        rest = first + b"".join(chunks)
    frames, _ = parse_frames(rest)
    assert frames[-1].event == {
        "type": "RUN_FINISHED",
        "threadId": "t-xcancel",
        "runId": "r1",
        "outcome": {"type": "cancelled"},
    }
    text = "".join(f.event.get("delta", "") for f in frames if f.event["type"] == "TEXT_MESSAGE_CONTENT")
    assert text != "a b c d e f g h"  # stopped before the model finished
