"""A running run survives its process (issue #45): killed with SIGKILL mid-run, it is taken over by
another process from its last step, in the same run and event log, and finishes once.

Two real ``manage.py serve`` processes on PostgreSQL and Redis, the fake Messages API, and the real
``@ag-ui/client`` 1.0.0 and 0.0.59 verifiers over what a client that reattached was sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from orchestrator.takeover import INTERRUPTED_UNKNOWN
from tests.cluster import Cluster, started_cluster
from tests.fakes.anthropic_api import Turn, text_turn, tool_turn
from tests.fakes.anthropic_api.script import tool_use, turn
from tests.helpers import eventually, unmarked, user
from tests.replayed import verified
from tests.sse import get_stream
from tests.takeover_cluster import events_of, reattached, run_body, seen_until_killed, text_of

pytestmark = [pytest.mark.services, pytest.mark.clients]
VERSIONS = ["1", "0"]


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from started_cluster(tmp_path_factory, "takeover", AGENT_MUTATING_TOOLS="on")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_run_killed_mid_run_is_taken_over_and_finishes_with_its_answer(cluster: Cluster, version: str) -> None:
    thread_id = f"t-over-{version}"
    (cluster.workspace / "notes.txt").write_text("the notes\n")
    hanging = text_turn(["Almost ", "there"]).pause(after_events=4, timeout=30)
    cluster.fake.script(
        [
            tool_turn("file_read", {"path": "notes.txt"}, id="toolu_r"),
            tool_turn("bash", {"command": "echo once >> counter"}, id="toolu_b"),
            hanging,
            text_turn(["The final ", "answer."]),
        ]
    )
    seen = seen_until_killed(cluster, cluster.a, version, thread_id, until=lambda s: b"Almost " in s)
    hanging.resume.set()
    rest = reattached(cluster, cluster.b, thread_id, seen)
    events = events_of(seen + rest)
    types = [e["type"] for e in events]
    assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", types
    assert text_of(events_of(rest)).endswith("The final answer.")
    # The model turn in flight was made again, from the same conversation; the calls were not.
    requests = cluster.fake.requests
    assert len(requests) == 4
    assert requests[3].body["messages"] == requests[2].body["messages"]
    assert (cluster.workspace / "counter").read_text() == "once\n"
    assert cluster.run_row(thread_id)[:3] == ("r1", "succeeded", 1)
    # What the client was sent, before the crash and after reattaching, is one run its verifier accepts.
    client = verified(version, seen + rest, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, (client["error"], types)
    assert client["messages"][-1]["content"].endswith("The final answer.")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_mutating_call_in_flight_is_not_run_again_and_the_model_is_told_its_effect_is_unknown(
    cluster: Cluster, version: str
) -> None:
    thread_id = f"t-over-bash-{version}"
    (cluster.workspace / "notes.txt").write_text("the notes\n")
    sleepy = {"command": "echo ran >> counter && touch started && sleep 60"}
    cluster.fake.script(
        [
            turn(tool_use("file_read", {"path": "notes.txt"}, id="toolu_r"), tool_use("bash", sleepy, id="toolu_b")),
            text_turn(["I will check the counter first."]),
        ]
    )
    seen = seen_until_killed(
        cluster, cluster.a, version, thread_id, until=lambda s: (cluster.workspace / "started").exists()
    )
    rest = reattached(cluster, cluster.b, thread_id, seen)
    assert [e["type"] for e in events_of(seen + rest)][-1] == "RUN_FINISHED"
    assert (cluster.workspace / "counter").read_text() == "ran\n"  # run once, never twice
    (answered,) = [r for r in cluster.fake.requests[1:]]
    results = {block["tool_use_id"]: block for block in unmarked(answered.body["messages"])[-1]["content"]}
    assert results["toolu_b"] == {
        "type": "tool_result",
        "tool_use_id": "toolu_b",
        "content": INTERRUPTED_UNKNOWN,
        "is_error": True,
    }
    assert "the notes" in str(results["toolu_r"]["content"])  # stored as it ended: kept, not lost
    shown = [e for e in events_of(rest) if e["type"] == "TOOL_CALL_RESULT"]
    assert [(e["toolCallId"], e["content"]) for e in shown] == [("toolu_b", INTERRUPTED_UNKNOWN)]
    client = verified(version, seen + rest, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, client["error"]


def test_a_follower_on_another_process_sees_the_run_go_on_to_its_end(cluster: Cluster) -> None:
    """A client following the run from B before A dies sees it through: no second RUN_STARTED."""
    thread_id = "t-over-follow"
    hanging = text_turn(["one ", "two"]).pause(after_events=4, timeout=30)
    cluster.fake.script([hanging, text_turn(["Done after all."])])
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    with httpx.stream(
        "POST", f"{cluster.a.url}/agui/coder", content=run_body("1", thread_id), headers=headers, timeout=30
    ) as response:
        next(response.iter_raw())
        assert hanging.paused.wait(10)
        import threading

        followed: list[Any] = []
        url = f"{cluster.b.url}/agui/coder/threads/{thread_id}/events"
        watcher = threading.Thread(target=lambda: followed.append(get_stream(url, token=cluster.b.token, timeout=60)))
        watcher.start()
        time.sleep(1.0)
        cluster.a.kill()
    hanging.resume.set()
    watcher.join(60)
    (follower,) = followed
    assert follower.types.count("RUN_STARTED") == 1 and follower.types[-1] == "RUN_FINISHED", follower.types
    assert text_of(follower.events).endswith("Done after all.")
    client = verified("1", follower.body, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, client["error"]


def _crash_while_it_thinks(cluster: Cluster, hanging: Turn, thread_id: str) -> None:
    assert hanging.paused.wait(30)
    time.sleep(0.5)
    victim = cluster.server_of(thread_id)
    victim.kill()
    hanging.resume.set()
    victim.start()


def test_a_run_that_crashes_its_process_every_time_ends_after_run_max_takeovers(cluster: Cluster) -> None:
    thread_id = "t-over-crashes"
    crashing = [text_turn(["thinking"]).pause(after_events=4, timeout=30) for _ in range(4)]
    cluster.fake.script(crashing)
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    with httpx.stream(
        "POST", f"{cluster.a.url}/agui/coder", content=run_body("1", thread_id), headers=headers, timeout=30
    ) as response:
        next(response.iter_raw())
    for hanging in crashing:  # the first on A, then one on each process that takes it over (3 by default)
        _crash_while_it_thinks(cluster, hanging, thread_id)
    eventually(lambda: cluster.run_row(thread_id)[1] != "running", seconds=30, what="the run to end")
    assert cluster.run_row(thread_id)[:3] == ("r1", "interrupted", 3)
    assert len(cluster.fake.requests) == 4
    replay = get_stream(f"{cluster.b.url}/agui/coder/threads/{thread_id}/runs/r1/events", token=cluster.b.token)
    assert replay.types.count("RUN_STARTED") == 1 and replay.types[-1] == "RUN_ERROR"
    assert replay.events[-1]["code"] == "takeover_limit"
    assert "RUN_MAX_TAKEOVERS" in replay.events[-1]["message"]
    client = verified("1", replay.body, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, client["error"]


def _stall_a_while_b_finishes(cluster: Cluster, hanging: Turn, thread_id: str) -> None:
    """Once A's model reply hangs mid-turn, A stalls (SIGSTOP, as a lost machine looks: its pid lives
    on) past its lease until B has taken the run over and finished it; then the reply and A go on."""
    import os
    import signal

    assert hanging.paused.wait(30)
    assert cluster.a.proc is not None
    time.sleep(1.0)
    os.kill(cluster.a.proc.pid, signal.SIGSTOP)
    try:
        eventually(lambda: cluster.run_row(thread_id)[1] == "succeeded", seconds=30, what="B to finish the run")
    finally:
        hanging.resume.set()
        os.kill(cluster.a.proc.pid, signal.SIGCONT)


def test_a_process_that_wakes_after_its_run_was_taken_over_writes_nothing_of_it(cluster: Cluster) -> None:
    """A stalls (SIGSTOP, as a lost machine looks: its pid lives on) past its lease; B takes the run
    over and finishes it. When A wakes, with its model's reply in hand, it commits no step, records
    no end and adds nothing to the run's log: the run stays as B left it."""
    thread_id = "t-over-wakes"
    hanging = text_turn(["stale ", "reply"]).pause(after_events=4, timeout=60)
    cluster.fake.script([hanging, text_turn(["Answered by B."])])
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    with httpx.stream(
        "POST", f"{cluster.a.url}/agui/coder", content=run_body("1", thread_id), headers=headers, timeout=30
    ) as response:
        next(response.iter_raw())
    _stall_a_while_b_finishes(cluster, hanging, thread_id)
    time.sleep(3.0)  # A's stale reply reaches it, and A has two lease renewals' time to write
    assert cluster.run_row(thread_id)[:3] == ("r1", "succeeded", 1)
    transcript = cluster.query(
        "SELECT m.body FROM threads_message m JOIN threads_thread t ON t.id = m.thread_id "
        "WHERE t.agui_thread_id = %s ORDER BY m.position",
        thread_id,
    )
    assert [body["role"] for (body,) in transcript] == ["user", "assistant"]
    assert transcript[1][0]["content"] == "Answered by B."
    replay = get_stream(f"{cluster.b.url}/agui/coder/threads/{thread_id}/runs/r1/events", token=cluster.b.token)
    assert "stale reply" not in text_of(replay.events)
    assert [t for t in replay.types if t in ("RUN_FINISHED", "RUN_ERROR")] == ["RUN_FINISHED"]
    client = verified("1", replay.body, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, client["error"]
    assert "was taken over by another process" in cluster.a.log.read_text()


def test_the_client_of_a_process_that_lost_its_run_ends_without_an_end_and_follows_it_on(cluster: Cluster) -> None:
    """A's client keeps reading while A stalls past its lease and B takes the run over and finishes
    it. When A wakes and finds the run gone, its client's stream ends with no terminal event (not a
    RUN_ERROR: the run did not fail), showing nothing A's log did not keep; the client reattaches to B
    from its last id and sees one run its verifier accepts, ending with B's answer."""
    import threading

    thread_id = "t-over-lost"
    hanging = text_turn(["stale ", "reply"]).pause(after_events=4, timeout=60)
    cluster.fake.script([hanging, text_turn(["Answered by B."])])
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    seen = bytearray()
    ended = threading.Event()

    def read() -> None:
        url = f"{cluster.a.url}/agui/coder"
        with httpx.stream("POST", url, content=run_body("1", thread_id), headers=headers, timeout=120) as response:
            for chunk in response.iter_raw():
                seen.extend(chunk)
        ended.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    _stall_a_while_b_finishes(cluster, hanging, thread_id)
    assert ended.wait(30), "A's stream did not end"
    shown = [e["type"] for e in events_of(bytes(seen))]
    assert shown[0] == "RUN_STARTED" and not {"RUN_FINISHED", "RUN_ERROR"} & set(shown), shown
    rest = reattached(cluster, cluster.b, thread_id, bytes(seen))
    types = [e["type"] for e in events_of(bytes(seen) + rest)]
    assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", types
    client = verified("1", bytes(seen) + rest, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, (client["error"], types)
    assert client["messages"][-1]["content"] == "Answered by B."


def test_a_sub_agent_in_flight_fails_its_delegation_as_unknown_and_the_run_goes_on(cluster: Cluster) -> None:
    thread_id = "t-over-child"
    sleepy = {"command": "echo child >> counter && touch started && sleep 60"}
    cluster.fake.script(
        [
            tool_turn("sub_agent", {"task": "SLEEPER: sleep", "role": "sleeper"}, id="toolu_sub"),
            text_turn(["The survey was cut short."]),
        ]
    )
    cluster.fake.script_for("SLEEPER", [tool_turn("bash", sleepy, id="toolu_zz")])
    seen = seen_until_killed(
        cluster, cluster.a, "1", thread_id, until=lambda s: (cluster.workspace / "started").exists()
    )
    rest = reattached(cluster, cluster.b, thread_id, seen)
    events = events_of(seen + rest)
    types = [e["type"] for e in events]
    assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", types
    # The child the dead process left at work is ended before anything else, then on the board.
    assert [e["type"] for e in events_of(rest) if e["type"].startswith("SUBAGENT")] == ["SUBAGENT_ERROR"]
    (entry,) = next(e for e in events_of(rest) if e["type"] == "STATE_SNAPSHOT")["snapshot"]["subAgents"]
    assert entry["role"] == "sleeper" and entry["status"] == "interrupted"
    parent = [r for r in cluster.fake.requests if "SLEEPER" not in str(r.body["messages"][0])]
    result = unmarked(parent[-1].body["messages"])[-1]["content"][0]
    assert result == {
        "type": "tool_result",
        "tool_use_id": "toolu_sub",
        "content": INTERRUPTED_UNKNOWN,
        "is_error": True,
    }
    assert (cluster.workspace / "counter").read_text() == "child\n"
    client = verified("1", seen + rest, thread_id=thread_id, run_id="r1")
    assert client["error"] is None, (client["error"], types)


def test_a_run_still_at_work_when_its_process_stops_is_handed_over_to_another(cluster: Cluster) -> None:
    """SIGTERM (a deploy): the run gets SERVER_DRAIN_SECONDS to reach a step boundary; still inside a step then, it is
    handed over, its lease let go, and another process goes on with it at once; a client that
    reattaches there sees it end with RUN_FINISHED."""
    thread_id = "t-over-term"
    cluster.a.kill()
    cluster.a.env["SERVER_DRAIN_SECONDS"] = "1"
    cluster.a.env["RUN_LEASE_SECONDS"] = "60"  # B cannot be waiting for the lease to lapse
    try:
        cluster.a.start()
        hanging = text_turn(["deploying ", "now"]).pause(after_events=4, timeout=60)
        cluster.fake.script([hanging, text_turn(["Finished after the deploy."])])
        seen = b""
        headers = {**cluster.a.headers, "Content-Type": "application/json"}
        with httpx.stream(
            "POST", f"{cluster.a.url}/agui/coder", content=run_body("1", thread_id), headers=headers, timeout=30
        ) as response:
            for chunk in response.iter_bytes():
                seen += chunk
                if seen.endswith(b"\n\n") and b"deploying " in seen:
                    break
        time.sleep(1.0)
        cluster.a.stop()  # SIGTERM, and wait for the process to exit
        hanging.resume.set()
        rest = reattached(cluster, cluster.b, thread_id, seen)
        types = [e["type"] for e in events_of(seen + rest)]
        assert types.count("RUN_STARTED") == 1 and types[-1] == "RUN_FINISHED", types
        assert text_of(events_of(rest)).endswith("Finished after the deploy.")
        assert cluster.run_row(thread_id)[:3] == ("r1", "succeeded", 1)
        client = verified("1", seen + rest, thread_id=thread_id, run_id="r1")
        assert client["error"] is None, client["error"]
    finally:
        cluster.a.kill()
        cluster.a.env.pop("SERVER_DRAIN_SECONDS")
        cluster.a.env["RUN_LEASE_SECONDS"] = "1.5"


def test_a_question_asked_after_a_takeover_is_answered_and_the_run_goes_on(cluster: Cluster) -> None:
    """The run taken over asks the user a question: it waits as any run does, recorded by the process
    that took it over, and the answer goes on with it."""
    from tests.agui_client import run_client

    thread_id = "t-over-ask"
    hanging = text_turn(["Let me ", "ask"]).pause(after_events=4, timeout=30)
    cluster.fake.script(
        [hanging, tool_turn("ask_user", {"question": "Which file?"}, id="toolu_q"), text_turn(["Using notes.txt."])]
    )
    seen = seen_until_killed(cluster, cluster.a, "1", thread_id, until=lambda s: b"Let me " in s)
    hanging.resume.set()
    rest = reattached(cluster, cluster.b, thread_id, seen)
    finished = events_of(rest)[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt", finished
    (interrupt,) = finished["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "toolu_q" and interrupt["reason"] == "input_required"
    assert verified("1", seen + rest, thread_id=thread_id, run_id="r1")["error"] is None
    assert cluster.run_row(thread_id)[1:3] == ("waiting", 1)
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"answer": "notes.txt"}}]
    (answered,) = run_client(
        "1",
        f"{cluster.b.url}/agui/coder",
        cluster.b.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [user("go", "u1")], "resume": resume}],
    )
    assert answered["error"] is None, answered["error"]
    assert answered["received"][-1]["type"] == "RUN_FINISHED"
    told = cluster.fake.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_q" and told["content"] == "notes.txt"
