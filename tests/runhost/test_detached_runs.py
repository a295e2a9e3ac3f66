"""Runs outlive their request: disconnects, reattach with Last-Event-ID, the next message.

A message sent while a run is busy joins it: tests/runhost/test_queued_messages.py."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import orjson

from tests.asgi_scripts import ASGI_POST, _env
from tests.eventlogs import logged as logged_events
from tests.fakes.anthropic_api import split_tokens, text_turn
from tests.helpers import run_input, user, v1
from tests.procs import ROOT
from tests.sse import get_stream, parse_frames, post_run
from threads.models import Run, Thread

HEADERS = {"Authorization": "Bearer test-token", "Content-Type": "application/json"}


def _read_some_frames_then_disconnect(url: str, body: dict, count: int) -> list[bytes]:
    """Posts a run, reads ``count`` SSE frames and drops the connection."""
    seen = bytearray()
    with httpx.stream("POST", url, content=orjson.dumps(body), headers=HEADERS, timeout=10) as response:
        assert response.status_code == 200
        for chunk in response.iter_raw():
            seen += chunk
            if seen.count(b"\n\n") >= count:
                break
    frames = bytes(seen).split(b"\n\n")[:count]
    return [f + b"\n\n" for f in frames]


def test_a_client_that_disconnects_does_not_stop_the_run(server, fake_api):
    paused = text_turn(split_tokens("one two three four five six seven eight nine ten")).pause(after_events=6)
    fake_api.script([paused])
    frames = _read_some_frames_then_disconnect(
        f"{server.url}/agui/coder", v1(run_input("t-gone", "r1", user("count"))), 4
    )
    assert paused.paused.wait(5)
    paused.resume.set()  # the model goes on after the client has gone
    server.drain()
    run = Run.objects.get(agui_run_id="r1")
    assert run.status == Run.Status.SUCCEEDED
    logged = logged_events(run)
    assert len(logged) == run.event_count
    assert logged[-1].type == "RUN_FINISHED"
    text = "".join(e.data["delta"] for e in logged if e.type == "TEXT_MESSAGE_CONTENT")
    assert text == "one two three four five six seven eight nine ten"
    # The first frames the client saw are the log's first events.
    assert [orjson.loads(f.split(b"data: ", 1)[1]) for f in frames] == [e.data for e in logged[:4]]

    # Reattach after the run ended: exactly the events after the last one seen.
    replay = get_stream(f"{server.url}/agui/coder/threads/t-gone/runs/r1/events", headers={"Last-Event-ID": "4"})
    assert replay.status == 200
    assert [f.id for f in replay.frames] == list(range(5, run.event_count + 1))
    assert [f.raw for f in replay.frames] == [e.payload.encode() for e in logged[4:]]


def test_reattach_follows_a_live_run_without_gaps_or_duplicates(server, fake_api):
    paused = text_turn(split_tokens("alpha beta gamma delta epsilon")).pause(after_events=6)
    fake_api.script([paused])
    _read_some_frames_then_disconnect(f"{server.url}/agui/coder", v1(run_input("t-live", "r1", user("go"))), 3)
    assert paused.paused.wait(5)
    with httpx.stream(
        "GET", f"{server.url}/agui/coder/threads/t-live/events", headers={**HEADERS, "Last-Event-ID": "3"}, timeout=10
    ) as response:
        assert response.status_code == 200
        body = bytearray()
        for chunk in response.iter_raw():
            body += chunk
            if b"data: " in body:
                paused.resume.set()  # the rest arrives live, to this subscriber
        frames, _ = parse_frames(bytes(body))
    server.drain()
    run = Run.objects.get(agui_run_id="r1")
    assert [f.id for f in frames] == list(range(4, run.event_count + 1))
    assert frames[-1].event["type"] == "RUN_FINISHED"


def test_after_query_parameter_works_like_last_event_id(server, fake_api):
    fake_api.script([text_turn(["a", "b"])])
    first = post_run(server.url, "coder", v1(run_input("t-after", "r1", user("x"))))
    server.drain()
    replay = get_stream(f"{server.url}/agui/coder/threads/t-after/runs/r1/events?after=2")
    assert [f.raw for f in replay.frames] == [f.raw for f in first.frames[2:]]


def test_reattach_rejects_bad_cursors_and_unknown_runs(server, fake_api):
    fake_api.script([text_turn(["a"])])
    post_run(server.url, "coder", v1(run_input("t-cur", "r1", user("x"))))
    server.drain()
    bad = get_stream(f"{server.url}/agui/coder/threads/t-cur/runs/r1/events", headers={"Last-Event-ID": "abc"})
    assert bad.status == 400 and bad.json()["error"]["field"] == "after"
    missing = get_stream(f"{server.url}/agui/coder/threads/t-cur/runs/nope/events")
    assert missing.status == 404
    missing_thread = get_stream(f"{server.url}/agui/coder/threads/nope/events")
    assert missing_thread.status == 404


def test_the_next_message_right_after_a_run_ends_is_accepted(server, fake_api):
    fake_api.script([text_turn(["one"]), text_turn(["two"])])
    first = post_run(server.url, "coder", v1(run_input("t-next", "r1", user("a", "u1"))))
    second = post_run(server.url, "coder", v1(run_input("t-next", "r2", user("a", "u1"), user("b", "u2"))))
    assert first.types[-1] == second.types[-1] == "RUN_FINISHED"


def test_a_hydrate_does_not_run_the_agent_or_write_a_run(server, fake_api):
    fake_api.script([text_turn(["hello"])])
    post_run(server.url, "coder", v1(run_input("t-hyd", "r1", user("hi", "u1"))))
    server.drain()
    again = post_run(server.url, "coder", v1(run_input("t-hyd", "r2", user("hi", "u1"))))
    assert again.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    messages = again.events[1]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "hello"
    assert Run.objects.count() == 1
    assert len(fake_api.requests) == 1


def test_a_hydrate_of_a_new_thread_answers_empty_snapshots_and_stores_nothing(server):
    hydrated = post_run(server.url, "coder", v1(run_input("t-never-written", "r1")))
    assert hydrated.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert hydrated.events[1]["messages"] == []
    snapshot = hydrated.events[2]["snapshot"]
    assert snapshot["thread"] == "t-never-written" and snapshot["todos"] == [] and snapshot["subAgents"] == []
    assert not Thread.objects.filter(agui_thread_id="t-never-written").exists()
    # The first message then opens the thread as usual.
    first = post_run(server.url, "coder", v1(run_input("t-never-written", "r2", user("hi", "u1"))))
    server.drain()
    assert first.types[-1] == "RUN_FINISHED"
    opened = Thread.objects.get(agui_thread_id="t-never-written")
    assert opened.messages.order_by("position").first().body["content"] == "hi"


def test_a_run_is_recorded_before_its_terminal_event_reaches_the_client(server, fake_api):
    fake_api.script([text_turn(split_tokens("every word of this reply is durable first"))])
    stream = post_run(server.url, "coder", v1(run_input("t-durable", "r1", user("x"))))
    # No drain: having seen RUN_FINISHED is enough.
    run = Run.objects.get(agui_run_id="r1")
    assert run.status == Run.Status.SUCCEEDED
    assert len(logged_events(run)) == len(stream.frames) == run.event_count


# A run's POST through project.asgi in this process: the client takes three body messages, stops
# reading and goes away. Prints the response's start, what was sent, and the run's stream after the disconnect.
DISCONNECT_SCRIPT = (
    ASGI_POST
    + """
from runhost.host import HOST
from threads.models import Run

async def main():
    gone = asyncio.Event()
    start, bodies = [], []
    async def send(message):
        if message["type"] == "http.response.start":
            start.append(message)
            return
        bodies.append(message)
        if len(bodies) == 3:
            gone.set()
            await asyncio.Event().wait()  # a client that stopped reading: the disconnect finds the send waiting
    await asyncio.wait_for(application(post_scope(b"detach"), receiver(gone), send), 30)
    (stream,) = HOST.registry.streams()  # the run goes on without its client
    subscribers, sent_then = stream.subscribers, stream.last_seq
    await HOST.drain()
    run = await Run.objects.aget(agui_run_id="r1")
    print(json.dumps({
        "headers": {k.decode().lower(): v.decode() for k, v in start[0]["headers"]},
        "status": start[0]["status"],
        "bodies": [m.get("more_body", False) for m in bodies],
        "text": b"".join(m.get("body", b"") for m in bodies).decode(),
        "subscribers": subscribers, "seq_at_disconnect": sent_then,
        "run": [run.status, run.event_count],
    }))

asyncio.run(main())
"""
)


def test_a_client_gone_mid_stream_leaves_no_subscriber_behind_and_the_run_finishes(tmp_path):
    # The AG-UI handler sends an SSE stream's chunks itself (agui/asgi.py): a disconnect that finds it
    # waiting on a send must still close the stream's generator, or the run's stream keeps a reader.
    env = _env(tmp_path) | {"AGUI_TOKEN": "detach", "DEMO_MODEL_DELAY_SECONDS": "0.02"}
    migrated = subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, text=True)
    assert migrated.returncode == 0
    done = subprocess.run([sys.executable, "-c", DISCONNECT_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 200
    assert report["headers"]["content-type"].startswith("text/event-stream")
    assert report["headers"]["cache-control"] == "no-cache" and report["headers"]["x-accel-buffering"] == "no"
    assert report["bodies"] == [True, True, True]  # no end was sent to a client that left
    assert report["text"].startswith("id: 1\ndata: ") and '"RUN_STARTED"' in report["text"]
    assert report["subscribers"] == 0
    status, event_count = report["run"]
    assert status == "succeeded" and event_count > report["seq_at_disconnect"] >= 3
