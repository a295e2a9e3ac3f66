"""A process that drains on SIGTERM (issue #45 item 4): new runs get 503 with Retry-After while reads
and reattaches are still served, its running run goes on to its next step boundary and is handed over
there (the tool call it was making is made once, with its result kept), and the process that goes on
with it counts a hand-over, not a crash.

Two real ``manage.py serve`` processes on PostgreSQL and Redis (test_takeover.py's cluster), the fake
Messages API, and the real ``@ag-ui/client`` 1.0.0 and 0.0.59 verifiers.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from orchestrator.takeover import INTERRUPTED_UNKNOWN
from tests.cluster import Cluster
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, unmarked, user, v1
from tests.replayed import verified
from tests.sse import parse_frames
from tests.takeover_cluster import VERSIONS, _cluster, events_of, reattached, run_body, text_of

pytestmark = [pytest.mark.services, pytest.mark.clients]
__all__ = ["_cluster"]  # the fixture (tests/takeover_cluster.py); ``cluster``: tests/runhost/conftest.py


@pytest.fixture
def draining(cluster: Cluster) -> Iterator[Cluster]:
    """A restarted with a long drain and a lease B could not wait out: only the hand-over moves a run."""
    cluster.a.kill()
    cluster.a.env.update(SERVER_DRAIN_SECONDS="30", RUN_LEASE_SECONDS="60")
    try:
        cluster.a.start()
        yield cluster
    finally:
        cluster.a.kill()
        cluster.a.env.pop("SERVER_DRAIN_SECONDS")
        cluster.a.env["RUN_LEASE_SECONDS"] = "1.5"


def _history(cluster: Cluster, thread_id: str) -> tuple[int, int, list[dict[str, Any]]]:
    ((row),) = cluster.query(
        "SELECT r.takeovers, r.handovers, r.takeover_history FROM threads_run r "
        "JOIN threads_thread t ON t.id = r.thread_id WHERE t.agui_thread_id = %s",
        thread_id,
    )
    return row  # type: ignore[no-any-return]


def _seen_until(server: Any, version: str, thread_id: str, marker: bytes) -> bytes:
    seen = b""
    headers = {**server.headers, "Content-Type": "application/json"}
    with httpx.stream(
        "POST", f"{server.url}/agui/coder", content=run_body(version, thread_id), headers=headers, timeout=30
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            seen += chunk
            if seen.endswith(b"\n\n") and marker in seen:
                break
    return seen


def _connect_until(cluster: Cluster, thread_id: str, version: str, marker: bytes) -> bytes:
    """What CopilotKit's /connect on B sends a page opening the thread, up to ``marker``."""
    opened = run_input(thread_id, "c1")
    shown = b""
    with httpx.stream(
        "POST",
        f"{cluster.b.url}/copilotkit/agent/coder/connect",
        content=orjson.dumps(v1(opened) if version == "1" else opened),
        headers={**cluster.b.headers, "Content-Type": "application/json"},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            shown += chunk
            if shown.endswith(b"\n\n") and marker in shown:
                break
    return shown


@pytest.mark.parametrize("version", VERSIONS)
def test_a_draining_process_refuses_new_runs_and_hands_its_run_over_at_the_next_step(
    draining: Cluster, version: str
) -> None:
    cluster = draining
    thread_id = f"t-drain-{version}"
    # The model's turn is still streaming when SIGTERM comes: the run finishes that step (the turn,
    # then its bash call, whose result is stored) and is handed over before the next model turn.
    asking = tool_turn("bash", {"command": "echo once >> counter"}, id="toolu_b", preamble=["Deploying ", "now"])
    slow = asking.pause(after_events=4, timeout=60)
    after = text_turn(["Finished after ", "the deploy."]).pause(after_events=4, timeout=60)
    cluster.fake.script([slow, after])
    seen = _seen_until(cluster.a, version, thread_id, b"Deploying ")
    assert cluster.a.proc is not None
    cluster.a.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)

    # While it drains: a new run is refused, whole, and nothing of it is stored ...
    new = run_input("t-drain-new", "r1", user("hello", "u1"))
    refused = httpx.post(
        f"{cluster.a.url}/agui/coder",
        content=orjson.dumps(v1(new) if version == "1" else new),
        headers={**cluster.a.headers, "Content-Type": "application/json"},
        timeout=10,
    )
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] == "1"
    assert refused.json()["error"]["code"] == "draining"
    assert cluster.query("SELECT 1 FROM threads_thread WHERE agui_thread_id = 't-drain-new'") == []
    # ... and reads and reattaches are still served.
    assert httpx.get(f"{cluster.a.url}/agui/info", headers=cluster.a.headers, timeout=10).status_code == 200
    last_id = parse_frames(seen)[0][-1].id
    with httpx.stream(
        "GET",
        f"{cluster.a.url}/agui/coder/threads/{thread_id}/runs/r1/events",
        headers={**cluster.a.headers, "Last-Event-ID": str(last_id)},
        timeout=10,
    ) as followed:
        assert followed.status_code == 200
    assert cluster.a.proc.poll() is None  # still draining: the run has not reached its step boundary

    slow.resume.set()
    cluster.a.proc.wait(30)  # handed over at the boundary, then gone
    # A page opening the thread on B while the run goes on there (CopilotKit's /connect) is shown the
    # hand-over: when, from which process to which, after which step.
    eventually(after.paused.is_set, seconds=30, what="B's model turn")
    shown = _connect_until(cluster, thread_id, version, b"threadline.takeover")
    (moved,) = [e["value"] for e in events_of(shown) if e["type"] == "CUSTOM" and e["name"] == "threadline.takeover"]
    after.resume.set()
    rest = reattached(cluster, cluster.b, thread_id, seen)
    (told,) = [e["value"] for e in events_of(rest) if e["type"] == "CUSTOM" and e["name"] == "threadline.takeover"]
    assert told == moved
    assert moved["kind"] == "handover" and moved["step"] == 1 and (moved["takeovers"], moved["crashes"]) == (1, 0)
    assert moved["from"].endswith(f":{cluster.a.proc.pid}") and moved["by"] == cluster.run_row(thread_id)[3]
    types = [e["type"] for e in events_of(seen + rest)]
    assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", types
    assert text_of(events_of(seen + rest)).endswith("Finished after the deploy.")
    # The bash call ran once, on A, and its result was kept: B only made the next model turn.
    assert (cluster.workspace / "counter").read_text() == "once\n"
    assert len(cluster.fake.requests) == 2
    (result,) = unmarked(cluster.fake.requests[1].body["messages"])[-1]["content"]
    assert result["tool_use_id"] == "toolu_b" and result["content"] != INTERRUPTED_UNKNOWN
    assert not result.get("is_error")
    # One takeover, a hand-over: it does not count towards RUN_MAX_TAKEOVERS.
    takeovers, handovers, history = _history(cluster, thread_id)
    assert (takeovers, handovers) == (1, 1)
    (entry,) = history
    assert entry["kind"] == "handover" and entry["step"] == 1
    assert entry["from"].endswith(f":{cluster.a.proc.pid}") and entry["by"] == cluster.run_row(thread_id)[3]
    assert cluster.run_row(thread_id)[:2] == ("r1", "succeeded")
    client = verified(version, seen + rest, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, (client["error"], types)


def test_hand_overs_do_not_count_towards_the_takeover_limit(cluster: Cluster) -> None:
    """A run handed over more often than RUN_MAX_TAKEOVERS (3) still goes on: each drain stops it at a
    step boundary, and only crashes count. Four drains in turn (A, B, A, B), then B finishes it."""
    thread_id = "t-drain-many"
    # Each model turn pauses while its process drains, then asks for one bash call: the boundary.
    paused = [
        tool_turn("bash", {"command": f"echo {n} >> counter"}, id=f"toolu_{n}", preamble=[f"step {n} "]).pause(
            after_events=4, timeout=60
        )
        for n in range(4)
    ]
    cluster.fake.script([*paused, text_turn(["All four steps done."])])
    seen = _seen_until(cluster.a, "1", thread_id, b"step 0 ")
    servers = [cluster.a, cluster.b]
    for n, turn_ in enumerate(paused):
        draining_server = servers[n % 2]
        eventually(turn_.paused.is_set, seconds=30, what="the model turn paused")
        assert draining_server.proc is not None
        draining_server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        turn_.resume.set()
        draining_server.proc.wait(30)
        draining_server.start()  # the deploy's new process
    rest = reattached(cluster, cluster.b, thread_id, seen)
    types = [e["type"] for e in events_of(seen + rest)]
    assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", types
    assert (cluster.workspace / "counter").read_text() == "0\n1\n2\n3\n"
    takeovers, handovers, history = _history(cluster, thread_id)
    assert (takeovers, handovers) == (4, 4) and [e["kind"] for e in history] == ["handover"] * 4
    assert [e["step"] for e in history] == [1, 2, 3, 4]
    assert verified("1", seen + rest, thread_id=thread_id, run_id="r1")["error"] is None
