"""Waiting runs across server processes, on PostgreSQL and Redis, as deployed behind a load balancer.

A run that waits for an answer is a checkpoint in the database: whichever process
receives the answer goes on with it, whether the process that started the run
is alive, killed or restarted. The clients are the real @ag-ui/client 1.0.0 and
0.0.59 with their verifiers.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.procs import ServerProcess
from tests.sse import get_stream, post_run
from tests.test_services import redis_url  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.services, pytest.mark.clients]
VERSIONS = ["1", "0"]
WRITE = {"path": "notes.txt", "content": "approved once\n"}


@dataclass
class Cluster:
    fake: FakeAnthropic
    a: ServerProcess
    b: ServerProcess
    workspace: Path
    database: str

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.database, autocommit=True) as db:
            return db.execute(sql, args).fetchall()


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two server processes for the module (starting them is the slow part); each test gets them
    alive, with an empty workspace and a fresh script."""
    import uuid

    from tests.test_services import PG_ADMIN, REDIS_URL, _unavailable

    name = f"threadline_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    database = f"postgresql://127.0.0.1:5432/{name}"
    root = tmp_path_factory.mktemp("cluster")
    workspace = root / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "DATABASE_URL": database,
            "REDIS_URL": REDIS_URL,
            "RUN_LEASE_SECONDS": "1.5",
            "WAIT_SWEEP_SECONDS": "0.2",
        }
        servers: list[ServerProcess] = []
        try:
            for label in ("a", "b"):
                (root / label).mkdir()
                servers.append(ServerProcess(data_dir=root / label, workspace=workspace, env=dict(env)).start())
            yield Cluster(fake, servers[0], servers[1], workspace, database)
        finally:
            for server in servers:
                server.kill()
            with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def cluster(_cluster: Cluster, redis_url: str) -> Iterator[Cluster]:  # noqa: F811
    for server in (_cluster.a, _cluster.b):
        if server.proc is None or server.proc.poll() is not None:
            server.start()
    _cluster.fake.reset()
    for path in _cluster.workspace.iterdir():
        path.unlink()
    yield _cluster
    _cluster.a.env.pop("APPROVAL_TIMEOUT_SECONDS", None)


def _ask(cluster: Cluster, version: str, thread_id: str, text: str = "note it", **extra: Any) -> dict[str, Any]:
    (asked,) = run_client(
        version,
        f"{cluster.a.url}/agui/coder",
        cluster.a.token,
        [{"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": text}], **extra}],
    )
    assert asked["error"] is None, asked["error"]
    assert asked["received"][-1]["type"] == "RUN_FINISHED", (asked["received"], cluster.a.log.read_text()[-3000:])
    return asked


def _answer_on(server: ServerProcess, version: str, thread_id: str, asked: dict[str, Any], **step: Any) -> dict:
    """A new page (or another agent object) on another process sends the answer."""
    (answered,) = run_client(
        version,
        f"{server.url}/agui/coder",
        server.token,
        [{"threadId": thread_id, "runId": "r1", "messages": asked["messages"], **step}],
    )
    assert answered["error"] is None, answered["error"]
    return answered


def _approve(asked: dict[str, Any], approved: bool = True) -> list[dict[str, Any]]:
    return [
        {"interruptId": i["id"], "status": "resolved", "payload": {"approved": approved}}
        for i in asked["pendingInterrupts"]
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_an_approval_asked_on_one_process_is_answered_on_another(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-approve-{version}"
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written."])])
    asked = _ask(cluster, version, thread_id)
    assert asked["pendingInterrupts"][0]["toolCallId"] == "toolu_w"
    answered = _answer_on(cluster.b, version, thread_id, asked, resume=_approve(asked))
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
    asked = _ask(cluster, version, thread_id, "paint it", tools=[tool])
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
    told = cluster.fake.requests[-1].body["messages"][-1]["content"][0]
    assert told == {"type": "tool_result", "tool_use_id": "toolu_bg", "content": "painted blue"}


@pytest.mark.parametrize("version", VERSIONS)
def test_a_question_asked_on_one_process_is_answered_on_another(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-ask-{version}"
    cluster.fake.script(
        [tool_turn("ask_user", {"question": "Which file?"}, id="toolu_q"), text_turn(["Using notes.txt."])]
    )
    asked = _ask(cluster, version, thread_id)
    (interrupt,) = asked["pendingInterrupts"]
    assert interrupt["reason"] == "input_required"
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"answer": "notes.txt"}}]
    answered = _answer_on(cluster.b, version, thread_id, asked, resume=resume)
    assert answered["messages"][-1]["content"] == "Using notes.txt."
    told = cluster.fake.requests[-1].body["messages"][-1]["content"][0]
    assert told["tool_use_id"] == "toolu_q" and told["content"] == "notes.txt"


def _staff_token(server: ServerProcess) -> str:
    made = server.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; from rest_framework.authtoken.models import Token; "
        "print(Token.objects.create(user=User.objects.create_user('ops', is_staff=True)).key)",
    )
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def test_an_answer_from_the_api_on_another_process_goes_on_while_the_first_lives(cluster: Cluster) -> None:
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written."])])
    asked = post_run(cluster.a.url, "coder", v1(run_input("t-x-api", "r1", user("note it"))), token=cluster.a.token)
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    token = _staff_token(cluster.b)
    answered = httpx.post(
        f"{cluster.b.url}/api/approvals/{interrupt['id']}/answer",
        headers={"Authorization": f"Token {token}"},
        json={"approved": True},
        timeout=10,
    )
    assert answered.status_code == 200, answered.text
    eventually(lambda: (cluster.workspace / "notes.txt").exists(), what="the approved write")
    # Whichever process took it, the thread's events stream shows the run that went on, from either process.
    follow = get_stream(f"{cluster.b.url}/agui/coder/threads/t-x-api/events", token=cluster.b.token)
    assert follow.types[0] == "RUN_STARTED" and follow.types[-1] == "RUN_FINISHED"
    assert any(e.get("toolCallId") == "toolu_w" for e in follow.events if e["type"] == "TOOL_CALL_RESULT")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_run_waiting_on_a_killed_process_completes_on_another(cluster: Cluster, version: str) -> None:
    thread_id = f"t-x-kill-{version}"
    cluster.fake.script([tool_turn("file_write", WRITE, id="toolu_w"), text_turn(["Written after the crash."])])
    asked = _ask(cluster, version, thread_id)
    cluster.a.kill()  # kill -9: nothing of it survives but the database
    answered = _answer_on(cluster.b, version, thread_id, asked, resume=_approve(asked))
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
        "SELECT r.event_count, (SELECT count(*) FROM threads_runevent e WHERE e.run_id = r.id), "
        "(SELECT e.type FROM threads_runevent e WHERE e.run_id = r.id ORDER BY e.seq DESC LIMIT 1) "
        "FROM threads_run r JOIN threads_thread t ON t.id = r.thread_id WHERE t.agui_thread_id = %s "
        "ORDER BY r.started_at",
        thread_id,
    )
    assert [(count, logged, last) for count, logged, last in runs] == [
        (runs[0][0], runs[0][0], "RUN_FINISHED"),
        (runs[1][0], runs[1][0], "RUN_FINISHED"),
    ]


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
