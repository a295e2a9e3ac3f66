"""A run stops at a safe point when cancelled, or pauses at a limit, and the client sees a terminal event
its protocol version accepts; "continue" goes on from the checkpoint."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import split_tokens, text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import EVENT, post_run
from threads.models import Run, Session

HEADERS = {"Authorization": "Bearer test-token"}


def _cancel(server, thread_id: str, run_id: str) -> httpx.Response:
    return httpx.post(f"{server.url}/agui/coder/threads/{thread_id}/runs/{run_id}/cancel", headers=HEADERS)


@pytest.mark.clients
@pytest.mark.parametrize("version", ["1", "0"])
def test_a_cancelled_run_ends_cleanly_for_both_client_versions(server, fake_api, version):
    slow = text_turn(split_tokens("a long answer that will be cut short")).pause(after_events=5)
    fake_api.script([slow])
    thread_id = f"t-cancel-{version}"
    with ThreadPoolExecutor(1) as pool:
        client = pool.submit(
            run_client,
            version,
            f"{server.url}/agui/coder",
            "test-token",
            [
                {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]},
            ],
        )
        assert slow.paused.wait(10)
        response = _cancel(server, thread_id, "r1")
        assert response.status_code == 202
        slow.resume.set()
        (result,) = client.result(30)
    assert result["error"] is None
    events = result["received"]
    for event in events:
        EVENT.validate_python(event)
    types = [e["type"] for e in events]
    assert types[-1] == "RUN_FINISHED"
    assert "TEXT_MESSAGE_END" in types  # what was open was closed first
    if version == "1":
        assert events[-1]["outcome"] == {"type": "cancelled"}
    else:
        assert "outcome" not in events[-1]
        assert events[-2] == {"type": "CUSTOM", "name": "threadline.cancelled", "value": {"reason": "cancelled"}}
    server.drain()
    run = Run.objects.get(agui_run_id="r1")
    assert run.status == Run.Status.CANCELLED
    # Nothing of the cut reply entered the model's history.
    assert [t["role"] for t in Session.objects.get(thread=run.thread).turns] == ["user"]


def test_cancel_answers_for_unknown_and_finished_runs(server, fake_api):
    fake_api.script([text_turn(["done"])])
    post_run(server.url, "coder", v1(run_input("t-c2", "r1", user("x"))))
    server.drain()
    assert _cancel(server, "t-c2", "nope").status_code == 404
    assert _cancel(server, "t-c2", "r1").status_code == 409
    assert httpx.post(f"{server.url}/agui/coder/threads/t-c2/runs/r1/cancel").status_code == 401
    assert httpx.get(f"{server.url}/agui/coder/threads/t-c2/runs/r1/cancel", headers=HEADERS).status_code == 405


def test_a_run_past_its_iteration_cap_pauses_and_continue_resumes_it(server, fake_api, coder):
    coder.max_iterations = 2
    coder.save()
    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*.md"}),
            tool_turn("file_read", {"path": "README.md"}),
            text_turn(["Finished after the pause."]),
        ]
    )
    paused = post_run(server.url, "coder", v1(run_input("t-pause", "r1", user("work", "u1"))))
    assert paused.types[-2:] == ["CUSTOM", "RUN_FINISHED"]
    assert paused.events[-2] == {"type": "CUSTOM", "name": "threadline.paused", "value": {"reason": "max_iterations"}}
    server.drain()
    assert Run.objects.get(agui_run_id="r1").status == Run.Status.PAUSED
    assert Session.objects.get(thread__agui_thread_id="t-pause").paused_reason == "max_iterations"

    resumed = post_run(server.url, "coder", v1(run_input("t-pause", "r2", user("work", "u1"), user("continue"))))
    assert resumed.types[-1] == "RUN_FINISHED"
    server.drain()
    # The model saw the whole checkpoint: both tool results, then "continue".
    history = fake_api.requests[-1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant", "user"]
    assert history[-1]["content"][0]["type"] == "tool_result"
    # The end of the conversation carries its prompt-cache breakpoint (#48).
    assert history[-1]["content"][-1] == {"type": "text", "text": "continue", "cache_control": {"type": "ephemeral"}}
    assert Session.objects.get(thread__agui_thread_id="t-pause").paused_reason == ""


def test_a_cancel_during_a_tool_stops_at_the_next_safe_point(server, fake_api, workspace):
    from django.test import override_settings

    fake_api.script([tool_turn("bash", {"command": "touch began && sleep 1 && echo finished"}), text_turn(["never"])])
    with override_settings(AGENT_MUTATING_TOOLS="on"), ThreadPoolExecutor(1) as pool:
        running = pool.submit(post_run, server.url, "coder", v1(run_input("t-midtool-cancel", "r1", user("go"))))
        for _ in range(100):
            if (workspace / "began").exists():
                break
            threading.Event().wait(0.05)
        assert _cancel(server, "t-midtool-cancel", "r1").status_code == 202
        stream = running.result(30)
    result = next(e for e in stream.events if e["type"] == "TOOL_CALL_RESULT")
    assert "finished" in result["content"]  # the tool was not killed halfway
    assert stream.events[-1]["outcome"] == {"type": "cancelled"}
    assert len(fake_api.requests) == 1  # no model call after the safe point
    server.drain()
    assert Run.objects.get(agui_run_id="r1").status == Run.Status.CANCELLED


def test_cancelling_a_waiting_run_ends_it_where_it_waits_and_the_thread_goes_on(server, fake_api, workspace):
    """A waiting run is a row, not a task: a cancel ends it there (no run goes on to be cancelled),
    closes its question, and the next message finds the call closed."""
    from threads.models import Approval

    fake_api.script([tool_turn("file_write", {"path": "x.txt", "content": "x"}), text_turn(["Next."])])
    asked = post_run(server.url, "coder", v1(run_input("t-cancel-wait", "r1", user("write", "u1"))))
    assert asked.events[-1]["outcome"]["type"] == "interrupt"
    assert _cancel(server, "t-cancel-wait", "r1").status_code == 202
    assert _cancel(server, "t-cancel-wait", "r1").status_code == 409  # ended already
    runs = list(Run.objects.filter(thread__agui_thread_id="t-cancel-wait").order_by("started_at"))
    assert [(r.status, r.outcome) for r in runs] == [(Run.Status.CANCELLED, "cancelled")]
    assert Approval.objects.get().decision == Approval.Decision.CANCELLED
    after = post_run(server.url, "coder", v1(run_input("t-cancel-wait", "r2", user("write", "u1"), user("and?"))))
    assert after.types[-1] == "RUN_FINISHED"
    server.drain()
    assert not (workspace / "x.txt").exists()
    closed = fake_api.requests[-1].body["messages"][-1]["content"][0]
    assert closed["type"] == "tool_result" and closed["is_error"] is True
