"""A message sent while a run is in flight joins it.

It is stored at once; the run reads it at its next tool boundary, or it starts the next run
when the run in flight ends first. The request that carried it gets a stream of its own
that follows the run from that point and ends with its own runId, verified by the real
clients. What follows across processes is in tests/runhost/test_waiting_runs.py.
"""

from __future__ import annotations

import threading
from typing import Any

import httpx
import orjson
import pytest
from django.test import override_settings

from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, unmarked, user, v1
from tests.sse import post_run
from threads.models import Message, QueuedMessage, Run, Thread

HEADERS = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}
QUEUED, READ = "threadline.message_queued", "threadline.queued_messages_read"


class Posted:
    """A POST whose stream is read to its end on a thread of its own."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.chunks = bytearray()
        self.status = 0
        self._thread = threading.Thread(target=self._read, args=(url, body), daemon=True)
        self._thread.start()

    def _read(self, url: str, body: dict[str, Any]) -> None:
        with httpx.stream("POST", url, content=orjson.dumps(body), headers=HEADERS, timeout=30) as response:
            self.status = response.status_code
            for chunk in response.iter_raw():
                self.chunks += chunk

    def events(self) -> list[dict[str, Any]]:
        self._thread.join(30)
        assert not self._thread.is_alive(), "the stream did not end"
        frames = [f for f in bytes(self.chunks).split(b"\n\n") if b"data: " in f]
        return [orjson.loads(f.split(b"data: ", 1)[1]) for f in frames]


class Clients:
    """Real @ag-ui/client runs on a thread of their own."""

    def __init__(self, version: str, url: str, runs: list[dict[str, Any]]) -> None:
        self.results: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, args=(version, url, runs), daemon=True)
        self._thread.start()

    def _run(self, version: str, url: str, runs: list[dict[str, Any]]) -> None:
        self.results = run_client(version, url, "test-token", runs)

    def result(self) -> dict[str, Any]:
        self._thread.join(60)
        assert not self._thread.is_alive(), "the client did not finish"
        (only,) = self.results
        return only


def _queued(thread_id: str) -> QueuedMessage | None:
    return QueuedMessage.objects.filter(thread__agui_thread_id=thread_id).first()


def _send_while_busy(url: str, thread_id: str, busy: Any, first: str, second: str) -> tuple[Posted, Posted]:
    """Starts run r1 with ``first``; once its model is paused in ``busy``, sends ``second`` as r2 and
    waits until it is queued."""
    one = Posted(url, v1(run_input(thread_id, "r1", user(first, "u1"))))
    assert busy.paused.wait(10)
    two = Posted(url, v1(run_input(thread_id, "r2", user(first, "u1"), user(second, "u2"))))
    eventually(lambda: _queued(thread_id), what="the message to be queued")
    return one, two


def _custom(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e["value"] for e in events if e["type"] == "CUSTOM" and e.get("name") == name]


# Each client version runs the first request once and the second once: a client that speaks the
# other version than the run it follows gets the terminal event in its own version's form.
@pytest.mark.parametrize(("version", "other"), [("1", "0"), ("0", "1")])
def test_a_message_sent_mid_run_is_read_at_the_next_tool_boundary(server, fake_api, workspace, version, other):
    (workspace / "notes.md").write_text("the notes\n")
    thread = f"t-join-{version}"
    reading = tool_turn("file_read", {"path": "notes.md"}, id="toolu_read").pause(after_events=2)
    fake_api.script([reading, text_turn(["read it, and ", "noted the second ask"])])
    url = f"{server.url}/agui/coder"
    first = Clients(version, url, [{"threadId": thread, "runId": "r1", "messages": [user("read the notes", "u1")]}])
    assert reading.paused.wait(20)
    second = Clients(
        other,
        url,
        [{"threadId": thread, "runId": "r2", "messages": [user("read the notes", "u1"), user("also: be brief", "u2")]}],
    )
    queued = eventually(lambda: _queued(thread), what="the second message to be queued")
    assert queued.status == QueuedMessage.Status.QUEUED and queued.agui_run_id == "r2"
    reading.resume.set()
    one, two = first.result(), second.result()
    assert one["error"] is None and two["error"] is None  # each client's verifier took its stream
    server.drain()

    # The model read the tool's result and the message in one turn: results first, then the text.
    last_turn = fake_api.requests[1].body["messages"][-1]
    assert last_turn["role"] == "user"
    assert [b["type"] for b in last_turn["content"]] == ["tool_result", "text"]
    assert last_turn["content"][1]["text"] == "also: be brief"
    assert len(fake_api.requests) == 2  # one run answered both; no run of its own for the second

    # The transcript holds it where the run read it, after the tool's result.
    roles = [(m.role, m.message_id) for m in Message.objects.filter(thread__agui_thread_id=thread)]
    assert [r for r, _ in roles] == ["user", "assistant", "tool", "user", "assistant"]
    assert roles[3][1] == "u2"
    queued.refresh_from_db()
    run = Run.objects.get(agui_run_id="r1")
    assert queued.status == QueuedMessage.Status.READ and queued.run_id == run.pk
    assert not Run.objects.filter(agui_run_id="r2").exists()

    # The run in flight told its client: queued, then read.
    one_events = one["events"]
    assert _custom(one_events, QUEUED) == [{"requestId": "r2", "display": "also: be brief"}]
    assert _custom(one_events, READ) == [{"requestIds": ["r2"]}]
    # The second request's stream is the run from the point it read the message, under its own runId.
    two_events = two["events"]
    assert two_events[0]["type"] == "RUN_STARTED" and two_events[0]["runId"] == "r2"
    assert two_events[-1]["type"] == "RUN_FINISHED" and two_events[-1]["runId"] == "r2"
    terminal = two["received"][-1]
    assert terminal.get("outcome") == ({"type": "success"} if other == "1" else None)
    assert _custom(two_events, READ) == [{"requestIds": ["r2"]}]
    text = "".join(e["delta"] for e in two_events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "read it, and noted the second ask"
    # It joined with the state document as it stood there, so its client's copy is the thread's.
    assert [e["type"] for e in two_events].index("STATE_SNAPSHOT") < [e["type"] for e in two_events].index("CUSTOM", 2)
    assert two["state"] == Thread.objects.get(agui_thread_id=thread).state
    assert not any(e["type"] == "TOOL_CALL_START" for e in two_events)  # the call came before it joined


def test_a_message_queued_when_the_run_ends_first_starts_the_next_run(server, fake_api, admin_client):
    slow = text_turn(["slow ", "reply"]).pause(after_events=4)
    fake_api.script([slow, text_turn(["the ", "second"])])
    url = f"{server.url}/agui/coder"
    first, second = _send_while_busy(url, "t-next-run", slow, "one", "two")
    slow.resume.set()
    one, two = first.events(), second.events()
    server.drain()
    assert one[-1]["type"] == "RUN_FINISHED" and one[-1]["runId"] == "r1"
    assert second.status == 200
    assert [e["type"] for e in two[:2]] == ["RUN_STARTED", "CUSTOM"]
    assert two[0]["runId"] == "r2" and two[1]["name"] == QUEUED
    assert [e["type"] for e in two].count("RUN_STARTED") == 1
    assert two[-1]["type"] == "RUN_FINISHED" and two[-1]["runId"] == "r2"
    assert "".join(e["delta"] for e in two if e["type"] == "TEXT_MESSAGE_CONTENT") == "the second"

    # The second run is known by the request's runId, and the model saw the whole history.
    runs = {r.agui_run_id: r for r in Run.objects.filter(thread__agui_thread_id="t-next-run")}
    assert {k: r.status for k, r in runs.items()} == {"r1": "succeeded", "r2": "succeeded"}
    queued = _queued("t-next-run")
    assert queued is not None and queued.status == QueuedMessage.Status.STARTED and queued.run_id == runs["r2"].pk
    history = fake_api.requests[1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert unmarked(history)[-1]["content"] == [{"type": "text", "text": "two"}]
    # An operator sees where it went.
    page = admin_client.get("/admin/threads/queuedmessage/").content.decode()
    assert "u2" in page and "Started the next run" in page


def test_a_run_in_flight_here_holds_its_thread_for_the_follower_even_when_its_lease_lapsed(server, fake_api):
    # A loaded process renews its leases late. Its own run still holds the thread, as run_open
    # judges it, so the follower relays that run instead of handing its message over again and
    # again (each time turned down) while the run works. Another process goes by the lease.
    from datetime import timedelta

    from django.utils import timezone

    from runhost.host import HOST
    from threads.queue import queue_fate

    slow = text_turn(["slow ", "reply"]).pause(after_events=4)
    fake_api.script([slow, text_turn(["the ", "second"])])
    url = f"{server.url}/agui/coder"
    first, second = _send_while_busy(url, "t-late-lease", slow, "one", "two")
    run = Run.objects.get(thread__agui_thread_id="t-late-lease", agui_run_id="r1")
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    queued = _queued("t-late-lease")
    assert queued is not None
    here = queue_fate(queued_pk=queued.pk, live_run_ids=HOST.registry.live_run_pks())
    elsewhere = queue_fate(queued_pk=queued.pk, live_run_ids=set())
    assert here is not None and here.busy_run_pk == run.pk
    assert elsewhere is not None and elsewhere.busy_run_pk is None
    slow.resume.set()
    assert first.events()[-1]["type"] == "RUN_FINISHED"
    two = second.events()
    assert two[-1]["type"] == "RUN_FINISHED" and two[-1]["runId"] == "r2"


def test_the_same_queued_message_sent_twice_is_queued_once(server, fake_api):
    slow = text_turn(["slow"]).pause(after_events=3)
    fake_api.script([slow, text_turn(["done"])])
    url = f"{server.url}/agui/coder"
    first = Posted(url, v1(run_input("t-twice", "r1", user("one", "u1"))))
    assert slow.paused.wait(10)
    body = v1(run_input("t-twice", "r2", user("one", "u1"), user("two", "u2")))
    second, again = Posted(url, body), Posted(url, body)
    eventually(lambda: QueuedMessage.objects.filter(thread__agui_thread_id="t-twice").count() == 1)
    slow.resume.set()
    first.events()
    for posted in (second, again):
        events = posted.events()
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["runId"] == "r2"
    server.drain()
    assert QueuedMessage.objects.filter(thread__agui_thread_id="t-twice").count() == 1
    assert Message.objects.filter(thread__agui_thread_id="t-twice", message_id="u2").count() == 1
    assert len(fake_api.requests) == 2


def test_a_message_queued_before_a_question_waits_for_its_answer_and_does_not_supersede_it(server, fake_api):
    """The run asks for an approval after the message was queued: the person still gets to answer,
    and the run that goes on reads the message with the call's result."""
    slow_write = tool_turn("file_write", {"path": "notes.txt", "content": "x\n"}, id="toolu_w").pause(after_events=2)
    fake_api.script([slow_write, text_turn(["Written; and brief it is."])])
    url = f"{server.url}/agui/coder"
    first, second = _send_while_busy(url, "t-behind-q", slow_write, "write it", "be brief")
    slow_write.resume.set()
    asked = first.events()
    (interrupt,) = asked[-1]["outcome"]["interrupts"]
    server.drain()
    approval = Run.objects.get(agui_run_id="r1").approvals.get()
    assert approval.decision == "pending"  # not superseded by a message sent before it was asked
    queued = _queued("t-behind-q")
    assert queued is not None and queued.status == QueuedMessage.Status.QUEUED
    answered = post_run(
        server.url,
        "coder",
        {
            **v1(run_input("t-behind-q", "r3", user("write it", "u1"))),
            "resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}],
        },
    )
    assert answered.types[-1] == "RUN_FINISHED"
    followed = second.events()
    server.drain()
    assert followed[-1]["type"] == "RUN_FINISHED" and followed[-1]["runId"] == "r2"
    assert "".join(e.get("delta", "") for e in followed if e["type"] == "TEXT_MESSAGE_CONTENT") == (
        "Written; and brief it is."
    )
    last_turn = fake_api.requests[1].body["messages"][-1]
    assert [b["type"] for b in last_turn["content"]] == ["tool_result", "text"]
    queued.refresh_from_db()
    assert queued.status == QueuedMessage.Status.READ
    approval.refresh_from_db()
    assert approval.decision == "approved"


def test_a_run_that_stops_at_its_limit_leaves_the_message_for_the_next_run(server, fake_api, coder, workspace):
    """Past its token budget the run will not call the model again, so it does not read the
    message (nobody would answer it); the message starts the next run instead."""
    (workspace / "notes.md").write_text("n\n")
    coder.token_budget = 10  # the first model call spends more than this
    coder.save()
    reading = tool_turn("file_read", {"path": "notes.md"}, id="toolu_r").pause(after_events=2)
    fake_api.script([reading, text_turn(["Answered in a run of its own."])])
    url = f"{server.url}/agui/coder"
    first, second = _send_while_busy(url, "t-limit", reading, "read", "and then?")
    reading.resume.set()
    one, two = first.events(), second.events()
    server.drain()
    assert _custom(one, "threadline.paused") and not _custom(one, READ)
    assert two[-1]["type"] == "RUN_FINISHED" and two[-1]["runId"] == "r2"
    queued = _queued("t-limit")
    assert queued is not None and queued.status == QueuedMessage.Status.STARTED
    assert Run.objects.get(agui_run_id="r1").status == Run.Status.PAUSED


def test_a_queued_message_whose_agent_was_disabled_meanwhile_ends_its_stream_with_the_reason(server, fake_api, coder):
    slow = text_turn(["slow"]).pause(after_events=3)
    fake_api.script([slow])
    url = f"{server.url}/agui/coder"
    first, second = _send_while_busy(url, "t-gone-agent", slow, "one", "two")
    coder.enabled = False
    coder.save()
    slow.resume.set()
    first.events()
    events = second.events()
    server.drain()
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "unknown_agent"
    queued = _queued("t-gone-agent")
    assert queued is not None and queued.status == QueuedMessage.Status.REFUSED and "coder" in queued.error


# A message refused at the queue: its runId is one a queued message has, or the thread's queue is full.
@pytest.mark.parametrize(
    ("run_id", "queue_max", "reason"),
    [("r2", 20, "already exists"), ("r3", 1, "already wait")],
    ids=["run-id-taken", "queue-full"],
)
def test_a_message_the_queue_refuses_ends_its_stream_with_a_conflict_and_is_not_stored(
    server, fake_api, run_id, queue_max, reason
):
    slow = text_turn(["slow"]).pause(after_events=3)
    fake_api.script([slow, text_turn(["done"])])
    url = f"{server.url}/agui/coder"
    with override_settings(QUEUED_MESSAGES_MAX=queue_max):
        first, second = _send_while_busy(url, f"t-refused-{run_id}", slow, "one", "two")
        body = v1(run_input(f"t-refused-{run_id}", run_id, user("one", "u1"), user("three", "u3")))
        refused = post_run(server.url, "coder", body)
    assert refused.types == ["RUN_STARTED", "RUN_ERROR"] and refused.events[1]["code"] == "conflict"
    assert reason in refused.events[1]["message"]
    slow.resume.set()
    first.events()
    assert second.events()[-1]["runId"] == "r2"
    server.drain()
    assert not QueuedMessage.objects.filter(message_id="u3").exists()
    assert not Message.objects.filter(message_id="u3").exists()
