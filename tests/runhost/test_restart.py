"""A thread survives a restart of the server process, and a killed run that cannot go on heals.

Since issue #45 a run killed with its process is taken over by a live process (tests/runhost/
test_takeover.py); these tests set RUN_MAX_TAKEOVERS=0, under which no run can be taken over, to keep
proving the healing that still ends every run that cannot go on (no step checkpointed, or taken over
too often): marked interrupted, its log ended, its session healed by the next message."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson

from orchestrator.memory import INTERRUPTED
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.helpers import run_input, unmarked, user, v1
from tests.procs import ServerProcess
from tests.restarts import conversation_survives_restart
from tests.sse import Stream, get_stream, parse_frames, post_run

# No run is taken over: a killed run is healed, as every run that cannot go on is.
HEALS = {"RUN_MAX_TAKEOVERS": "0"}


@contextmanager
def _first_run(server: ServerProcess, thread_id: str) -> Iterator[httpx.Response]:
    """The stream of the thread's first run, open (its status checked)."""
    with httpx.stream(
        "POST",
        f"{server.url}/agui/coder",
        timeout=10,
        content=orjson.dumps(v1(run_input(thread_id, "r1", user("one", "u1")))),
        headers={**server.headers, "Content-Type": "application/json"},
    ) as response:
        assert response.status_code == 200
        yield response


def test_a_conversation_continues_after_a_restart(tmp_path):
    conversation_survives_restart(tmp_path, {})


def test_a_run_killed_with_its_process_is_marked_interrupted_and_the_thread_heals(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, **HEALS}
        server = ServerProcess(data_dir=tmp_path, workspace=workspace, env=env).start()
        try:
            hanging = text_turn(["never ", "finished"]).pause(after_events=4, timeout=30)
            fake.script([hanging])
            with _first_run(server, "t-kill"):
                assert hanging.paused.wait(10)
                server.kill()
            hanging.resume.set()
            server.start()
            # A reattach to the dead run does not wait for ever: it ends with RUN_ERROR, and so does
            # every replay of its log, which now holds its end (its open message closed first).
            replay = get_stream(
                f"{server.url}/agui/coder/threads/t-kill/runs/r1/events", token=server.token, timeout=20
            )
            assert replay.types[0] == "RUN_STARTED" and replay.types[-1] == "RUN_ERROR"
            assert replay.events[-1]["code"] == "interrupted"
            assert replay.types.count("TEXT_MESSAGE_START") == replay.types.count("TEXT_MESSAGE_END")
            counted = server.manage(
                "shell",
                "-c",
                "from threads.models import Run; from threads.selectors import run_events_after; "
                "r = Run.objects.get(); print(r.event_count, len(run_events_after(run=r, after=0)))",
            )
            assert counted.stdout.splitlines()[-1].split() == [str(len(replay.events))] * 2, replay.types
            fake.script([text_turn(["Healed."])])
            after = post_run(
                server.url,
                "coder",
                v1(run_input("t-kill", "r2", user("one", "u1"), user("two", "u2"))),
                token=server.token,
            )
            assert after.types[-1] == "RUN_FINISHED"
            # Both user messages reach the model as one well-formed turn.
            assert unmarked(fake.requests[-1].body["messages"]) == [
                {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}
            ]
            status = server.manage(
                "shell",
                "-c",
                "from threads.models import Run; print(sorted(Run.objects.values_list('agui_run_id', 'status')))",
            )
            assert "('r1', 'interrupted')" in status.stdout, status.stderr
            assert "('r2', 'succeeded')" in status.stdout
        finally:
            server.kill()


def test_a_client_ahead_of_a_dead_runs_log_is_told_how_it_ended(tmp_path):
    # The stream runs ahead of the durable log (it gathers frames for up to
    # EVENT_LOG_MAX_DELAY_SECONDS): a client holding events its dead process never logged
    # reattaches with a Last-Event-ID beyond the log, and still gets the run's end, after the
    # closes of what it was shown open.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            **HEALS,
            "EVENT_LOG_FLUSH_SECONDS": "60",
            "EVENT_LOG_MAX_DELAY_SECONDS": "60",
        }
        server = ServerProcess(data_dir=tmp_path, workspace=workspace, env=env).start()
        try:
            hanging = text_turn(["never ", "finished"]).pause(after_events=4, timeout=30)
            fake.script([hanging])
            seen = b""
            with _first_run(server, "t-ahead") as response:
                for chunk in response.iter_bytes():
                    seen += chunk
                    if b"TEXT_MESSAGE_CONTENT" in seen and seen.endswith(b"\n\n"):
                        break
                server.kill()
            hanging.resume.set()
            frames, _ = parse_frames(seen)
            last_id = frames[-1].id
            assert last_id is not None and [f.event["type"] for f in frames][-1] == "TEXT_MESSAGE_CONTENT"
            server.start()
            replay = get_stream(
                f"{server.url}/agui/coder/threads/t-ahead/runs/r1/events",
                token=server.token,
                headers={"Last-Event-ID": str(last_id)},
                timeout=20,
            )
            assert replay.status == 200
            # What it was shown opened a step and a message, each logged before it was shown
            # (agui/stream.py HELD_TYPES): both are closed for it, then the run's end.
            assert replay.types == ["TEXT_MESSAGE_END", "STEP_FINISHED", "RUN_ERROR"], replay.body
            assert replay.events[-1]["code"] == "interrupted"
            # The end comes after every id the client could hold, never in place of one (issue #49).
            assert replay.frames[0].id is not None and replay.frames[0].id > last_id
        finally:
            server.kill()


def test_a_client_shown_more_than_the_log_kept_gets_the_closing_events_after_its_last_id(tmp_path):
    """Issue #49 item 7: the log kept part of what the dead process streamed. The healed end closes
    what the log left open and comes after the client's Last-Event-ID, so the client gets all of it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            **HEALS,
            "EVENT_LOG_FLUSH_SECONDS": "0.005",
            "EVENT_LOG_MAX_DELAY_SECONDS": "60",  # a frame waits for its 32 events: the tail stays unlogged
        }
        server = ServerProcess(data_dir=tmp_path, workspace=workspace, env=env).start()
        try:
            hanging = text_turn([f"word{i} " for i in range(80)]).paced(0.01).pause(after_events=50, timeout=30)
            fake.script([hanging])
            seen = b""
            with _first_run(server, "t-partial") as response:
                for chunk in response.iter_bytes():
                    seen += chunk
                    if hanging.paused.is_set() and seen.endswith(b"\n\n") and seen.count(b"TEXT_MESSAGE_CONTENT") >= 45:
                        break
                time.sleep(0.3)
                server.kill()
            hanging.resume.set()
            frames, _ = parse_frames(seen)
            last_id = frames[-1].id
            assert last_id is not None
            server.start()
            logged = get_stream(f"{server.url}/agui/coder/threads/t-partial/runs/r1/events", token=server.token)
            assert logged.types[-1] == "RUN_ERROR"
            assert len([t for t in logged.types if t == "TEXT_MESSAGE_CONTENT"]) < 45  # the log kept less
            replay = get_stream(
                f"{server.url}/agui/coder/threads/t-partial/runs/r1/events",
                token=server.token,
                headers={"Last-Event-ID": str(last_id)},
                timeout=20,
            )
            assert replay.status == 200
            assert replay.types[0] == "TEXT_MESSAGE_END" and replay.types[-1] == "RUN_ERROR", replay.types
            assert all(frame.id is not None and frame.id > last_id for frame in replay.frames)
        finally:
            server.kill()


def _kill_mid_tool(server: ServerProcess, workspace: Path, thread_id: str) -> None:
    """Starts a run whose bash call touches ``started`` and sleeps, and kills the server mid-call."""
    with _first_run(server, thread_id):
        for _ in range(100):
            if (workspace / "started").exists():
                break
            time.sleep(0.1)
        assert (workspace / "started").exists()
        server.kill()


SLEEPY = {"command": "touch started && sleep 60"}


@contextmanager
def _killable_server(tmp_path: Path) -> Iterator[tuple[FakeAnthropic, ServerProcess, Path]]:
    """A server process on the fake model with mutating tools on, killed at the end."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {
            "ANTHROPIC_API_KEY": "sk-fake",
            "ANTHROPIC_BASE_URL": fake.base_url,
            "AGENT_MUTATING_TOOLS": "on",
            **HEALS,
        }
        server = ServerProcess(data_dir=tmp_path, workspace=workspace, env=env).start()
        try:
            yield fake, server, workspace
        finally:
            server.kill()


def _second_message(server: ServerProcess, thread_id: str) -> Stream:
    return post_run(
        server.url,
        "coder",
        v1(run_input(thread_id, "r2", user("one", "u1"), user("two", "u2"))),
        token=server.token,
    )


def test_a_process_killed_mid_tool_leaves_a_session_the_next_message_heals(tmp_path):
    with _killable_server(tmp_path) as (fake, server, workspace):
        fake.script([tool_turn("bash", SLEEPY, id="toolu_sleepy")])
        _kill_mid_tool(server, workspace, "t-midtool")
        server.start()
        fake.script([text_turn(["Picked up again."])])
        after = _second_message(server, "t-midtool")
        assert after.types[-1] == "RUN_FINISHED"
        history = fake.requests[-1].body["messages"]
        assert [m["role"] for m in history] == ["user", "assistant", "user"]
        assert history[1]["content"][0]["id"] == "toolu_sleepy"
        closing = unmarked(history)[2]["content"]
        assert closing[0] == {
            "type": "tool_result",
            "tool_use_id": "toolu_sleepy",
            "content": INTERRUPTED,
            "is_error": True,
        }
        assert closing[-1] == {"type": "text", "text": "two"}
        hydrated = post_run(server.url, "coder", v1(run_input("t-midtool", "r3")), token=server.token)
        transcript = hydrated.events[1]["messages"]
        assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "user", "assistant"]
        assert transcript[2]["toolCallId"] == "toolu_sleepy"


def test_a_child_killed_with_its_process_is_interrupted_on_the_board(tmp_path):
    with _killable_server(tmp_path) as (fake, server, workspace):
        fake.script([tool_turn("sub_agent", {"task": "SLEEPER: sleep", "role": "sleeper"}, id="toolu_sub")])
        fake.script_for("SLEEPER", [tool_turn("bash", SLEEPY, id="toolu_zz")])
        _kill_mid_tool(server, workspace, "t-kill-child")
        server.start()
        fake.script([text_turn(["The survey was cut short."])])
        after = _second_message(server, "t-kill-child")
        assert after.types[-1] == "RUN_FINISHED"
        (entry,) = after.events[1]["snapshot"]["subAgents"]
        assert entry["role"] == "sleeper" and entry["status"] == "interrupted"
        assert entry["error"] == "the server stopped while it ran"
        # The parent's sub_agent call was closed as interrupted before the new message.
        history = fake.requests[-1].body["messages"]
        assert unmarked(history)[2]["content"][0] == {
            "type": "tool_result",
            "tool_use_id": "toolu_sub",
            "content": INTERRUPTED,
            "is_error": True,
        }
