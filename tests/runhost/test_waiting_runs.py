"""Waiting runs across server processes, on PostgreSQL and Redis, as deployed behind a load balancer.

A run that waits for an answer is a checkpoint in the database: whichever process
receives the answer goes on with it, whether the process that started the run
is alive, killed or restarted. The clients are the real @ag-ui/client 1.0.0 and
0.0.59 with their verifiers.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.agui_client import run_client
from tests.cluster import Cluster, answer_on, ask
from tests.fakes.anthropic_api import split_tokens, text_turn, tool_turn
from tests.helpers import eventually, run_input, unmarked, user, v1
from tests.procs import ServerProcess
from tests.sse import get_stream, post_run
from threads.logframes import decode

pytestmark = [pytest.mark.services, pytest.mark.clients]
VERSIONS = ["1", "0"]
WRITE = {"path": "notes.txt", "content": "approved once\n"}


def _approve(asked: dict[str, Any], approved: bool = True) -> list[dict[str, Any]]:
    return [
        {"interruptId": i["id"], "status": "resolved", "payload": {"approved": approved}}
        for i in asked["pendingInterrupts"]
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_approval_asked_on_one_process_is_answered_on_another(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-approve-{version}"
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written."])])
    asked = ask(cluster, version, thread_id)
    assert asked["pendingInterrupts"][0]["toolCallId"] == "toolu_w"
    answered = answer_on(cluster.b, version, thread_id, asked, resume=_approve(asked))
    types = [e["type"] for e in answered["received"]]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert next(e for e in answered["received"] if e["type"] == "TOOL_CALL_RESULT")["toolCallId"] == "toolu_w"
    assert answered["messages"][-1]["content"] == "Written."
    assert (cluster.workspace / "notes.txt").read_text() == WRITE["content"]
    owners = cluster.query(
        "SELECT r.status, r.owner FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id "
        "WHERE t.agui_thread_id = %s ORDER BY r.started_at",
        thread_id,
    )
    assert [status for status, _ in owners] == ["succeeded", "succeeded"]
    assert str(cluster.b.proc.pid) in owners[1][1]  # B went on with it


@pytest.mark.parametrize("version", VERSIONS)
def test_a_browser_tool_result_sent_to_another_process_goes_on(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-tool-{version}"
    tool = {"name": "change_background", "description": "Paint the page.", "parameters": {"type": "object"}}
    cluster.fake.script([tool_turn("change_background", {"color": "blue"}, id="toolu_bg"), text_turn(["Blue now."])])
    asked = ask(cluster, version, thread_id, "paint it", tools=[tool])
    assert asked["messages"][-1]["toolCalls"][0]["id"] == "toolu_bg"
    result = {"id": "tool-result-1", "role": "tool", "toolCallId": "toolu_bg", "content": "painted blue"}
    (answered,) = run_client(
        version,
        f"{cluster.b.url}/agui/coder",
        cluster.b.token,
        [{"threadId": thread_id, "runId": "r2", "messages": [*asked["messages"], result], "tools": [tool]}],
    )
    assert answered["error"] is None, answered["error"]
    assert answered["messages"][-1]["content"] == "Blue now."
    told = unmarked(cluster.fake.requests[-1].body["messages"])[-1]["content"][0]
    assert told == {"type": "tool_result", "tool_use_id": "toolu_bg", "content": "painted blue"}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_question_asked_on_one_process_is_answered_on_another(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-ask-{version}"
    cluster.fake.script(
        [tool_turn("ask_user", {"question": "Which file?"}, id="toolu_q"), text_turn(["Using notes.txt."])]
    )
    asked = ask(cluster, version, thread_id)
    (interrupt,) = asked["pendingInterrupts"]
    assert interrupt["reason"] == "input_required"
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"answer": "notes.txt"}}]
    answered = answer_on(cluster.b, version, thread_id, asked, resume=resume)
    assert answered["messages"][-1]["content"] == "Using notes.txt."
    told = cluster.fake.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_q" and told["content"] == "notes.txt"


def _staff_token(server: ServerProcess) -> str:
    made = server.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from rest_framework.authtoken.models import Token; "
        "from django.contrib.auth.models import Permission; "
        "ops, _ = User.objects.get_or_create(username='ops', defaults={'is_staff': True}); "
        # Answering another's approval takes the change permission on approvals, as in the admin.
        "ops.user_permissions.add(Permission.objects.get(codename='change_approval')); "
        "print(Token.objects.get_or_create(user=ops)[0].key)",  # one user for the module's tests
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def _asked_on_a(cluster: Cluster, thread_id: str, state: Any = None) -> str:
    """A run on A that waits for the approval of a file_write; the interrupt's id."""
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written."])])
    body = v1(run_input(thread_id, "r1", user("note it")))
    asked = post_run(cluster.a.url, "coder", body if state is None else {**body, "state": state}, token=cluster.a.token)
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    return str(interrupt["id"])


def _approved_through_the_api_on_b(cluster: Cluster, interrupt_id: str) -> None:
    answered = httpx.post(
        f"{cluster.b.url}/api/approvals/{interrupt_id}/answer",
        headers={"Authorization": f"Token {_staff_token(cluster.b)}"},
        json={"approved": True},
        timeout=10,
    )
    assert answered.status_code == 200, answered.text


def test_an_answer_from_the_api_on_another_process_goes_on_while_the_first_lives(cluster: Cluster) -> None:
    _approved_through_the_api_on_b(cluster, _asked_on_a(cluster, "t-x-api"))
    eventually(lambda: (cluster.workspace / "notes.txt").exists(), what="the approved write")
    # Whichever process took it, the thread's events stream shows the run that went on, from either process.
    follow = get_stream(f"{cluster.b.url}/agui/coder/threads/t-x-api/events", token=cluster.b.token)
    assert follow.types[0] == "RUN_STARTED" and follow.types[-1] == "RUN_FINISHED"
    assert any(e.get("toolCallId") == "toolu_w" for e in follow.events if e["type"] == "TOOL_CALL_RESULT")


def test_a_client_state_with_large_numbers_survives_postgresql_when_the_run_goes_on(cluster: Cluster) -> None:
    # jsonb gives 1e22 back as the integer 10000000000000000000000, which orjson will not write:
    # the run that went on (from the stored state, in the background) failed to start, and its
    # thread stayed busy until the lease lapsed. It is written as the float a client sent.
    state = {"n": 1e22, "deep": {"m": [-1e25, 7]}}
    _approved_through_the_api_on_b(cluster, _asked_on_a(cluster, "t-x-big", state))
    eventually(lambda: (cluster.workspace / "notes.txt").exists(), what="the approved write")
    follow = get_stream(f"{cluster.b.url}/agui/coder/threads/t-x-big/events", token=cluster.b.token)
    assert follow.types[0] == "RUN_STARTED" and follow.types[-1] == "RUN_FINISHED"
    (snapshot,) = [e["snapshot"] for e in follow.events if e["type"] == "STATE_SNAPSHOT"]
    assert snapshot["client"] == state


def test_a_run_that_cannot_start_is_recorded_as_failed_and_frees_its_thread(cluster: Cluster) -> None:
    # A state no event can carry (nested past the encoder's limit, as a release before the input
    # limits could store it) makes the run that goes on fail as it starts. It ends with RUN_ERROR
    # in its log and is recorded as failed at once; it was left running, its thread held until
    # its lease lapsed and its log without an end.
    interrupt_id = _asked_on_a(cluster, "t-x-deep")
    cluster.query(
        "UPDATE threads_thread SET state = jsonb_set(state, '{client}', %s::jsonb) WHERE agui_thread_id = %s "
        "RETURNING id",
        _deep_json(300),
        "t-x-deep",
    )
    _approved_through_the_api_on_b(cluster, interrupt_id)

    def went_on() -> list[tuple[Any, ...]]:
        return cluster.query(
            f"SELECT r.status, r.event_count, {LOGGED}, {LAST_FRAME} "
            "FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id "
            "WHERE t.agui_thread_id = %s AND r.parent_id IS NOT NULL AND r.status <> 'running'",
            "t-x-deep",
        )

    eventually(went_on, what="the run that went on to be recorded")
    ((status, event_count, logged, last),) = went_on()
    assert (status, _last_type(last)) == ("failed", "RUN_ERROR") and event_count == logged


# Per run r: how many events its log holds, and its last frame.
LOGGED = "(SELECT coalesce(sum(e.last_seq - e.first_seq + 1), 0) FROM threads_eventframe e WHERE e.run_id = r.id)"
LAST_FRAME = "(SELECT e.body FROM threads_eventframe e WHERE e.run_id = r.id ORDER BY e.last_seq DESC LIMIT 1)"


def _last_type(frame: bytes) -> str:
    """The type of the last event of a run's last logged frame."""
    return decode(frame)[-1][0]


def _deep_json(levels: int) -> str:
    return '{"deep": ' + "[" * levels + "0" + "]" * levels + "}"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_run_waiting_on_a_killed_process_completes_on_another(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-kill-{version}"
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written after the crash."])])
    asked = ask(cluster, version, thread_id)
    cluster.a.kill()  # kill -9: nothing of it survives but the database
    answered = answer_on(cluster.b, version, thread_id, asked, resume=_approve(asked))
    assert answered["messages"][-1]["content"] == "Written after the crash."
    assert (cluster.workspace / "notes.txt").read_text() == WRITE["content"]
    assert sorted(p.name for p in cluster.workspace.iterdir()) == ["notes.txt"]
    # Nothing lost: the transcript has every message, and every run's log ends with its terminal event.
    roles = cluster.query(
        "SELECT m.role FROM threads_message m JOIN threads_thread t ON t.id = m.thread_id "
        "WHERE t.agui_thread_id = %s ORDER BY m.position",
        thread_id,
    )
    assert [r for (r,) in roles] == ["user", "assistant", "tool", "assistant"]
    runs = cluster.query(
        f"SELECT r.event_count, {LOGGED}, {LAST_FRAME} "
        "FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id WHERE t.agui_thread_id = %s "
        "ORDER BY r.started_at",
        thread_id,
    )
    assert [(count, logged, _last_type(last)) for count, logged, last in runs] == [
        (runs[0][0], runs[0][0], "RUN_FINISHED"),
        (runs[1][0], runs[1][0], "RUN_FINISHED"),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_edit_of_a_read_file_approved_after_its_process_died_is_made_on_another(
    cluster: Cluster, version: str
) -> None:
    """What the agent read before the approval counts on the process that goes on (issue #42)."""
    thread_id = f"t-x-read-edit-{version}"
    (cluster.workspace / "notes.txt").write_text("remember the milk\n")
    edit = {"path": "notes.txt", "old_string": "milk", "new_string": "bread"}
    cluster.fake.script(
        [
            tool_turn("file_read", {"path": "notes.txt"}, id="toolu_r"),
            tool_turn("file_edit", edit, id="toolu_e"),
            text_turn(["Edited after the crash."]),
        ]
    )
    asked = ask(cluster, version, thread_id)
    assert asked["pendingInterrupts"][0]["toolCallId"] == "toolu_e"
    cluster.a.kill()
    answered = answer_on(cluster.b, version, thread_id, asked, resume=_approve(asked))
    result = next(e for e in answered["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == "toolu_e" and "read the file" not in result["content"], result
    assert answered["messages"][-1]["content"] == "Edited after the crash."
    assert (cluster.workspace / "notes.txt").read_text() == "remember the bread\n"


def test_twenty_waiting_threads_survive_a_rolling_restart(cluster: Cluster) -> None:
    threads = [f"t-roll-{i}" for i in range(20)]
    for i in range(len(threads)):
        write = {"path": f"f{i}.txt", "content": f"{i}\n"}
        cluster.fake.script_for(f"roll {i} please", [tool_turn("file_write", write), text_turn([f"done {i}"])])
    interrupts = {}
    for i, thread_id in enumerate(threads):
        server = (cluster.a, cluster.b)[i % 2]
        asked = post_run(
            server.url, "coder", v1(run_input(thread_id, "r1", user(f"roll {i} please"))), token=server.token
        )
        interrupts[thread_id] = asked.events[-1]["outcome"]["interrupts"][0]["id"]
    for server in (cluster.a, cluster.b):  # one after the other, as a deploy does
        server.stop()
        server.start()
    for i, thread_id in enumerate(threads):
        server = (cluster.b, cluster.a)[i % 2]  # the other process than the one that asked
        resume = [{"interruptId": interrupts[thread_id], "status": "resolved", "payload": {"approved": True}}]
        answered = post_run(
            server.url, "coder", {**v1(run_input(thread_id, "r1")), "resume": resume}, token=server.token
        )
        assert answered.types[-1] == "RUN_FINISHED", answered.events[-1]
    assert sorted(p.name for p in cluster.workspace.iterdir()) == sorted(f"f{i}.txt" for i in range(20))


def test_two_answers_racing_on_two_processes_run_the_tool_once(cluster: Cluster) -> None:
    command = {"command": "echo ran >> count.txt"}
    cluster.fake.script([tool_turn("bash", command, id="toolu_b"), text_turn(["Ran it."]), text_turn(["Ran it."])])
    asked = post_run(cluster.a.url, "coder", v1(run_input("t-race", "r1", user("run it"))), token=cluster.a.token)
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def answer(server: ServerProcess) -> None:
        barrier.wait()
        body = {**v1(run_input("t-race", "r1")), "resume": resume}
        results[server.url] = post_run(server.url, "coder", body, token=server.token)

    racers = [threading.Thread(target=answer, args=(s,)) for s in (cluster.a, cluster.b)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
    went_on = [r for r in results.values() if "TOOL_CALL_RESULT" in r.types]
    assert len(went_on) == 1  # one process claimed the run; the other was shown the thread
    assert all(r.types[-1] == "RUN_FINISHED" for r in results.values())
    eventually(lambda: (cluster.workspace / "count.txt").exists(), what="the approved command")
    assert (cluster.workspace / "count.txt").read_text() == "ran\n"
    (decision,) = cluster.query("SELECT decision FROM threads_approval WHERE id = %s", interrupt["id"])
    assert decision == ("approved",)


def test_a_deadline_passes_while_the_owner_is_dead_and_the_sweep_times_it_out(cluster: Cluster) -> None:
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Nobody answered."])])
    cluster.a.env["APPROVAL_TIMEOUT_SECONDS"] = "1"
    cluster.a.stop()
    cluster.a.start()
    asked = post_run(cluster.a.url, "coder", v1(run_input("t-x-expiry", "r1", user("note it"))), token=cluster.a.token)
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    cluster.a.kill()
    cluster.a.env.pop("APPROVAL_TIMEOUT_SECONDS")
    # B's sweep finds the deadline passed; nothing runs, and the model is told.
    eventually(
        lambda: cluster.query("SELECT decision FROM threads_approval WHERE id = %s", interrupt["id"]) == [("timeout",)],
        what="the timeout",
    )
    eventually(lambda: len(cluster.fake.requests) == 2, what="the run going on")
    told = cluster.fake.requests[-1].body["messages"][-1]["content"][0]
    assert "nobody approved this file_write call in time" in told["content"]
    assert not (cluster.workspace / "notes.txt").exists()


def test_a_thousand_waiting_threads_hold_no_task(cluster: Cluster) -> None:
    """Waiting costs rows, not memory: after 1,000 threads asked and were left waiting, the
    process runs no task for any of them (bench/waiting.py measures the memory)."""
    count = 1000
    cluster.fake.script([tool_turn("file_write", WRITE) for _ in range(count)])
    with httpx.Client(timeout=30) as client:
        for i in range(count):
            body = v1(run_input(f"t-many-{i}", "r1", user("note it")))
            response = client.post(f"{cluster.a.url}/agui/coder", json=body, headers=cluster.a.headers)
            assert b'"interrupt"' in response.content
    (waiting,) = cluster.query(
        "SELECT count(*) FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id "
        "WHERE r.status = 'waiting' AND t.agui_thread_id LIKE 't-many-%%'"
    )
    assert waiting == (count,)
    tasks = httpx.get(f"{cluster.a.url}/metrics", headers=cluster.a.headers).text
    line = next(line for line in tasks.splitlines() if line.startswith("threadline_live_runs "))
    assert float(line.split()[1]) == 0
    assert subprocess.run(["kill", "-0", str(cluster.a.proc.pid)]).returncode == 0


def test_serve_with_two_workers_takes_answers_in_either(cluster: Cluster, tmp_path: Path) -> None:
    """``manage.py serve --workers 2``: two processes on one port, as a deployment runs them; each
    thread's answer may reach either, and every run goes on."""
    env = {
        k: v
        for k, v in cluster.a.env.items()
        if k in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DATABASE_URL", "REDIS_URL")
    }
    (tmp_path / "w").mkdir()
    pair = ServerProcess(data_dir=tmp_path / "w", workspace=cluster.workspace, env=env, serve_args=("--workers", "2"))
    pair.start()
    try:
        children = Path(f"/proc/{pair.proc.pid}/task/{pair.proc.pid}/children").read_text().split()
        assert len(children) >= 2  # the two workers (and perhaps multiprocessing's helper)
        for i in range(10):
            cluster.fake.script_for(
                f"pair {i}", [tool_turn("file_write", {"path": f"p{i}.txt", "content": "x"}), text_turn(["ok"])]
            )
        for i in range(10):
            asked = post_run(pair.url, "coder", v1(run_input(f"t-pair-{i}", "r1", user(f"pair {i}"))), token=pair.token)
            (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
            resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]
            done = post_run(
                pair.url, "coder", {**v1(run_input(f"t-pair-{i}", "r1")), "resume": resume}, token=pair.token
            )
            assert done.types[-1] == "RUN_FINISHED" and "TOOL_CALL_RESULT" in done.types
        assert sorted(p.name for p in cluster.workspace.iterdir()) == sorted(f"p{i}.txt" for i in range(10))
    finally:
        pair.kill()


def test_serve_refuses_several_workers_on_one_processes_database(tmp_path: Path) -> None:
    server = ServerProcess(data_dir=tmp_path, workspace=tmp_path)
    refused = server.manage("serve", "--workers", "2")
    assert refused.returncode != 0
    assert "--workers above 1 needs DATABASE_URL (PostgreSQL) and REDIS_URL" in refused.stderr


def test_a_follower_of_a_run_whose_process_dies_sees_it_taken_over_to_its_end(cluster: Cluster) -> None:
    """B follows a run of A; A is killed mid-reply. The run is taken over (issue #45: it used to end
    with RUN_ERROR interrupted), its model turn made again, and B's stream ends with RUN_FINISHED; the
    run's log ends the same way for every later replay, its count matching what it holds."""
    slow = text_turn(split_tokens("one two three four five six")).pause(after_events=4)
    cluster.fake.script([slow, text_turn(["Made again."])])
    body = orjson.dumps(v1(run_input("t-dies", "r1", user("go"))))
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    followed: list[Any] = []
    url = f"{cluster.b.url}/agui/coder/threads/t-dies/events"
    with httpx.stream("POST", f"{cluster.a.url}/agui/coder", content=body, headers=headers, timeout=10) as resp:
        next(resp.iter_raw())
        assert slow.paused.wait(10)
        watcher = threading.Thread(target=lambda: followed.append(get_stream(url, token=cluster.b.token, timeout=60)))
        watcher.start()
        cluster.a.kill()
    slow.resume.set()
    watcher.join(60)
    (follower,) = followed
    assert follower.types.count("RUN_STARTED") == 1 and follower.types[-1] == "RUN_FINISHED", follower.types
    replay = get_stream(f"{cluster.b.url}/agui/coder/threads/t-dies/events", token=cluster.b.token)
    assert replay.types[0] == "RUN_STARTED" and replay.types[-1] == "RUN_FINISHED"
    ((status, count, logged),) = cluster.query(
        f"SELECT r.status, r.event_count, {LOGGED} "
        "FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id WHERE t.agui_thread_id = 't-dies'"
    )
    assert status == "succeeded" and count == logged == len(replay.events)


# -- messages sent while a run is in flight, across processes ----------


def _queued_on(cluster: Cluster, thread_id: str) -> list[str]:
    rows = cluster.query(
        "SELECT q.status FROM threads_queuedmessage q JOIN threads_thread t ON t.id = q.thread_id "
        "WHERE t.agui_thread_id = %s ORDER BY q.queued_at",
        thread_id,
    )
    return [status for (status,) in rows]


def _client_on(
    server: ServerProcess, version: str, run: dict[str, Any], into: list[dict[str, Any]]
) -> threading.Thread:
    def go() -> None:
        into.extend(run_client(version, f"{server.url}/agui/coder", server.token, [run]))

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    return worker


@pytest.mark.parametrize("version", VERSIONS)
def test_a_message_sent_to_another_process_joins_the_run_at_its_tool_boundary(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-join-{version}"
    (cluster.workspace / "notes.txt").write_text("the notes\n")
    reading = tool_turn("file_read", {"path": "notes.txt"}, id="toolu_r").pause(after_events=2)
    cluster.fake.script([reading, text_turn(["Read, and brief."])])
    first: list[dict[str, Any]] = []
    second: list[dict[str, Any]] = []
    one = _client_on(
        cluster.a, version, {"threadId": thread_id, "runId": "r1", "messages": [user("read", "u1")]}, first
    )
    assert reading.paused.wait(20)
    two = _client_on(
        cluster.b,
        version,
        {"threadId": thread_id, "runId": "r2", "messages": [user("read", "u1"), user("be brief", "u2")]},
        second,
    )
    eventually(lambda: _queued_on(cluster, thread_id) == ["queued"], what="the message to be queued on B")
    reading.resume.set()
    one.join(60)
    two.join(60)
    ((a,), (b,)) = first, second
    assert a["error"] is None and b["error"] is None, (a["error"], b["error"])
    assert b["received"][0]["runId"] == "r2" and b["received"][-1]["runId"] == "r2"
    read = [e for e in b["received"] if e["type"] == "CUSTOM" and e["name"] == "threadline.queued_messages_read"]
    assert [e["value"] for e in read] == [{"requestIds": ["r2"]}]
    assert b["messages"][-1]["content"] == "Read, and brief."
    last_turn = cluster.fake.requests[1].body["messages"][-1]
    assert [block["type"] for block in last_turn["content"]] == ["tool_result", "text"]
    assert _queued_on(cluster, thread_id) == ["read"]
    # A's run was told of the message before it read it, though it came to another process.
    names = [e.get("name") for e in a["received"] if e["type"] == "CUSTOM"]
    assert names.index("threadline.message_queued") < names.index("threadline.queued_messages_read")


def test_a_message_queued_while_its_run_s_process_dies_is_read_by_the_run_taken_over(cluster: Cluster) -> None:
    """A is killed mid-reply with a message queued on B. The run is taken over (issue #45: the message
    used to start a run of its own after A's was marked interrupted), reads the message before its
    model turn is made again, and B's request streams it to its end: nothing queued is lost."""
    slow = text_turn(split_tokens("one two three four")).pause(after_events=4)
    cluster.fake.script([slow, text_turn(["Taken over."])])
    body = orjson.dumps(v1(run_input("t-x-orphan", "r1", user("go", "u1"))))
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    followed: list[Any] = []
    with httpx.stream("POST", f"{cluster.a.url}/agui/coder", content=body, headers=headers, timeout=10) as resp:
        next(resp.iter_raw())
        assert slow.paused.wait(10)
        queued = v1(run_input("t-x-orphan", "r2", user("go", "u1"), user("and then", "u2")))
        sender = threading.Thread(
            target=lambda: followed.append(post_run(cluster.b.url, "coder", queued, token=cluster.b.token, timeout=60))
        )
        sender.start()
        eventually(lambda: _queued_on(cluster, "t-x-orphan") == ["queued"], what="the message to be queued on B")
        cluster.a.kill()
    slow.resume.set()
    sender.join(60)
    (stream,) = followed
    assert stream.types[0] == "RUN_STARTED" and stream.types[-1] == "RUN_FINISHED"
    assert stream.events[-1]["runId"] == "r2"
    assert "".join(e.get("delta", "") for e in stream.events if e["type"] == "TEXT_MESSAGE_CONTENT") == "Taken over."
    assert _queued_on(cluster, "t-x-orphan") == ["read"]
    assert unmarked(cluster.fake.requests[-1].body["messages"])[-1]["content"][-1] == {
        "type": "text",
        "text": "and then",
    }
    runs = cluster.query(
        "SELECT r.agui_run_id, r.status, r.takeovers FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id "
        "WHERE t.agui_thread_id = 't-x-orphan' ORDER BY r.started_at"
    )
    assert runs == [("r1", "succeeded", 1)]
    roles = cluster.query(
        "SELECT m.role, m.message_id FROM threads_message m JOIN threads_thread t ON t.id = m.thread_id "
        "WHERE t.agui_thread_id = 't-x-orphan' ORDER BY m.position"
    )
    assert [r for r, _ in roles] == ["user", "user", "assistant"] and roles[1][1] == "u2"


def test_a_run_in_flight_hears_at_once_of_a_message_queued_on_another_process(cluster: Cluster) -> None:
    """on_message_queued reaches A's run while its model is still replying (A learns of B's queue
    when it renews its lease), not only at a tool boundary that may be far away."""
    slow = text_turn(split_tokens("a long reply")).pause(after_events=3)
    cluster.fake.script([slow, text_turn(["next"])])
    body = orjson.dumps(v1(run_input("t-x-heard", "r1", user("go", "u1"))))
    headers = {**cluster.a.headers, "Content-Type": "application/json"}
    followed: list[Any] = []
    seen = bytearray()
    with httpx.stream("POST", f"{cluster.a.url}/agui/coder", content=body, headers=headers, timeout=30) as resp:
        chunks = resp.iter_raw()
        assert slow.paused.wait(10)
        queued = v1(run_input("t-x-heard", "r2", user("go", "u1"), user("and more", "u2")))
        sender = threading.Thread(
            target=lambda: followed.append(post_run(cluster.b.url, "coder", queued, token=cluster.b.token, timeout=60))
        )
        sender.start()
        # Heard while the model is still paused mid-reply (the stream's read timeout bounds the wait).
        while b"threadline.message_queued" not in seen:
            seen += next(chunks)
        slow.resume.set()
        for chunk in chunks:
            seen += chunk
    sender.join(60)
    heard = [f for f in bytes(seen).split(b"\n\n") if b"threadline.message_queued" in f]
    assert len(heard) == 1 and b'"requestId":"r2"' in heard[0] and b'"display":"and more"' in heard[0]
    (stream,) = followed
    assert stream.events[-1]["runId"] == "r2" and _queued_on(cluster, "t-x-heard") == ["started"]


def test_a_users_run_goes_on_in_the_same_workspace_on_another_process(cluster: Cluster) -> None:
    # Issue #24: two processes on one workspaces root; the user's run asks on A, is answered on B,
    # and B writes into the same directory A made, which A's next run reads.
    made = cluster.a.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from rest_framework.authtoken.models import Token; "
        "u = User.objects.create_user('wanda'); print(u.pk, Token.objects.create(user=u).key)",
    )
    assert made.returncode == 0, made.stderr
    user_id, key = made.stdout.split()[-2:]
    headers = {"Authorization": f"Token {key}"}
    thread_id = "t-x-workspace"
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written."])])
    start = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "note"}]}
    (asked,) = run_client("1", f"{cluster.a.url}/agui/coder", "", [start], headers=headers)
    assert asked["error"] is None and asked["pendingInterrupts"], asked
    answer = {"threadId": thread_id, "runId": "r1", "messages": asked["messages"], "resume": _approve(asked)}
    (answered,) = run_client("1", f"{cluster.b.url}/agui/coder", "", [answer], headers=headers)
    assert answered["error"] is None and answered["messages"][-1]["content"] == "Written."
    root = Path(cluster.a.env["AGENT_WORKSPACES_ROOT"])
    assert root == Path(cluster.b.env["AGENT_WORKSPACES_ROOT"])
    assert (root / "users" / user_id / "notes.txt").read_text() == WRITE["content"]
    assert not (cluster.workspace / "notes.txt").exists()  # not the shared token's workspace
    cluster.fake.script([tool_turn("file_read", {"path": "notes.txt"}), text_turn(["Read."])])
    again = {
        "threadId": thread_id,
        "runId": "r2",
        "messages": [*answered["messages"], {"id": "u2", "role": "user", "content": "read it"}],
    }
    (read,) = run_client("1", f"{cluster.a.url}/agui/coder", "", [again], headers=headers)
    assert read["error"] is None
    result = next(e for e in read["received"] if e["type"] == "TOOL_CALL_RESULT")
    assert WRITE["content"].strip() in result["content"]
