"""A run's event timeline in the admin: the log read as messages, tool calls, approvals and errors."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from agents.models import Agent
from tests.eventlogs import log_events
from threads.admin.timeline_fold import TEXT_CAP, Kind
from threads.admin.timeline_reads import run_timeline
from threads.models import Approval, Run, Session, SubAgentTask, Thread


@pytest.fixture
def thread(db: None) -> Thread:
    agent = Agent.objects.create(name="coder-timeline")
    made = Thread.objects.create(agui_thread_id="t-timeline", agent=agent, title="a thread")
    Session.objects.create(thread=made)
    return made


def log(run: Run, *events: dict[str, Any]) -> None:
    """Appends events to the run's log, numbered after what is there."""
    log_events(run, list(events), per_frame=3)


def streamed_text(message_id: str, words: list[str]) -> list[dict[str, Any]]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message_id, "role": "assistant"},
        *({"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": w} for w in words),
        {"type": "TEXT_MESSAGE_END", "messageId": message_id},
    ]


def tool_call(call_id: str, name: str, args: str, result: str | None = None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [
        {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name, "parentMessageId": "m"},
        *({"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": args[i : i + 7]} for i in range(0, len(args), 7)),
        {"type": "TOOL_CALL_END", "toolCallId": call_id},
    ]
    if result is not None:
        events.append(
            {"type": "TOOL_CALL_RESULT", "messageId": f"res-{call_id}", "toolCallId": call_id, "content": result}
        )
    return events


def started(run: Run) -> dict[str, Any]:
    return {"type": "RUN_STARTED", "threadId": run.thread.agui_thread_id, "runId": run.agui_run_id}


def finished(run: Run, outcome: dict[str, Any] | None = None) -> dict[str, Any]:
    event = {"type": "RUN_FINISHED", "threadId": run.thread.agui_thread_id, "runId": run.agui_run_id}
    return {**event, "outcome": outcome} if outcome else event


def approval(run: Run, call_id: str, tool: str, **fields: Any) -> Approval:
    return Approval.objects.create(
        id=f"approval-{call_id}",
        run=run,
        tool_call_id=call_id,
        tool=tool,
        arguments={},
        message=f"Allow {tool}?",
        expires_at=timezone.now() + dt.timedelta(minutes=10),
        **fields,
    )


def page_of(client: Client, run: Run, **query: str) -> str:
    response = client.get(f"/admin/threads/run/{run.pk}/timeline/", query)
    assert response.status_code == 200
    return response.content.decode()


def marked(html: str, css_class: str) -> int:
    """How many elements carry the class (the page's own styles name it too)."""
    return len(re.findall(rf'class="[^"]*\b{css_class}\b[^"]*"', html))


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_streamed_message_reads_as_one_text(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    words = [f"word{i} " for i in range(500)]
    log(run, started(run), *streamed_text("m1", words), finished(run))
    timeline = run_timeline(run=run)
    texts = [e for e in timeline.entries if e.kind == Kind.TEXT]
    assert len(texts) == 1
    assert texts[0].body is not None and texts[0].body.text == "".join(words)
    assert (texts[0].seq, texts[0].last_seq, texts[0].events) == (2, 503, 502)
    page = page_of(operator, run)
    assert "".join(words).strip() in page
    assert page.count("word42 ") == 1
    assert "message, 502 events" in text_of(page)


def test_tool_calls_show_their_arguments_and_result(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    args = '{"path": "src/app.py", "limit": 20}'
    log(run, started(run), *tool_call("call-1", "file_read", args, "1\tdef main():"), finished(run))
    page = page_of(operator, run)
    assert "tool call <strong>file_read</strong>" in page
    assert "&quot;path&quot;: &quot;src/app.py&quot;,\n  &quot;limit&quot;: 20" in page  # indented JSON
    assert "1\tdef main():" in page
    assert marked(page, "tl-is-error") == 0


def test_a_tool_result_that_was_an_error_is_highlighted(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    log(
        run,
        started(run),
        *tool_call("ok-call", "glob", '{"pattern": "*"}', "README.md"),
        *tool_call("bad-call", "file_read", '{"path": "nope"}', "no such file: nope"),
        finished(run),
    )
    # The log has no error flag; the session's turns (the model's view) do.
    Session.objects.filter(thread=thread).update(
        turns=[
            {"role": "user", "content": "read it"},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "ok-call", "content": "README.md"},
                    {"type": "tool_result", "tool_use_id": "bad-call", "content": "no such file", "is_error": True},
                ],
            },
        ]
    )
    tools = {e.call_id: e for e in run_timeline(run=run).entries if e.kind == Kind.TOOL}
    assert not tools["ok-call"].is_error and tools["bad-call"].is_error
    page = page_of(operator, run)
    assert marked(page, "tl-is-error") == 1
    assert "error result" in page


def test_a_run_error_is_highlighted(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.FAILED, error="the model is gone")
    log(run, started(run), {"type": "RUN_ERROR", "message": "the model API failed: 529", "code": "overloaded"})
    page = page_of(operator, run)
    assert 'class="tl-entry tl-kind-error tl-is-error"' in page
    assert "run error (overloaded)" in page and "the model API failed: 529" in page


def test_a_pending_approval_shows_on_its_call_with_a_way_to_the_queue(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.WAITING, outcome="interrupt")
    asked = approval(run, "call-w", "file_write")
    interrupt = {"id": asked.pk, "reason": "confirmation", "message": "Allow file_write?", "toolCallId": "call-w"}
    log(
        run,
        started(run),
        *tool_call("call-w", "file_write", '{"path": "notes.txt"}'),
        finished(run, {"type": "interrupt", "interrupts": [interrupt]}),
    )
    page = page_of(operator, run)
    assert f"Approval <code>{asked.pk}</code>" in page
    assert f'href="/admin/threads/approval/?id__exact={asked.pk}">answer it in the queue</a>' in page
    assert "run finished</strong>: waiting for an answer" in page
    assert "confirmation: Allow file_write?" in page


def test_an_answered_approval_and_the_run_that_continued_share_the_page(operator, thread):
    waited = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.WAITING, outcome="interrupt")
    asked = approval(waited, "call-t", "todo_write")
    log(
        waited,
        started(waited),
        *tool_call("call-t", "todo_write", '{"todos": []}'),
        finished(waited, {"type": "interrupt", "interrupts": [{"id": asked.pk, "reason": "confirmation"}]}),
    )
    Approval.objects.filter(pk=asked.pk).update(
        decision=Approval.Decision.APPROVED, answered_by="operator", answered_at=asked.requested_at
    )
    went_on = Run.objects.create(thread=thread, agui_run_id="r1-continued", parent=waited, status=Run.Status.SUCCEEDED)
    log(
        went_on,
        started(went_on),
        {"type": "TOOL_CALL_RESULT", "messageId": "tm", "toolCallId": "call-t", "content": "todo list updated"},
        *streamed_text("m2", ["The ", "list ", "is ", "written."]),
        finished(went_on),
    )
    timeline = run_timeline(run=waited)
    assert [s.status for s in timeline.segments] == ["continued", "succeeded"]
    assert not timeline.live
    tool = next(e for e in timeline.entries if e.kind == Kind.TOOL)
    assert tool.result is not None and tool.result.text == "todo list updated"
    assert tool.result_run == went_on
    page = text_of(page_of(operator, waited))
    assert "Approved by operator after 0.0 s" in page
    assert "result #2 in run r1-continued" in page
    assert page.index("Run r1 ") < page.index("Run r1-continued") < page.index("The list is written.")
    # The continuation's own page starts with it and points back.
    own = page_of(operator, went_on)
    assert f'this run continues <a href="/admin/threads/run/{waited.pk}/timeline/">r1</a>' in own


def test_text_beyond_the_cap_is_counted_not_shown(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    chunk = "x" * 1000
    log(run, started(run), *streamed_text("m1", [chunk] * 25), finished(run))
    entry = next(e for e in run_timeline(run=run).entries if e.kind == Kind.TEXT)
    assert entry.body is not None and entry.body.kept == TEXT_CAP and entry.body.dropped == 25_000 - TEXT_CAP
    assert f"… {25_000 - TEXT_CAP} more characters not shown" in page_of(operator, run)


def test_bookkeeping_between_entries_folds_into_one_quiet_line(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    log(
        run,
        started(run),
        {"type": "STATE_SNAPSHOT", "snapshot": {"todos": []}},
        {"type": "STEP_STARTED", "stepName": "planning"},
        *streamed_text("m1", ["hi"]),
        {"type": "STEP_FINISHED", "stepName": "planning"},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/tokenUsage/inputTokens", "value": 3}]},
        {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/tokenUsage/inputTokens", "value": 9}]},
        finished(run),
    )
    quiet = [e for e in run_timeline(run=run).entries if e.kind == Kind.QUIET]
    assert [q.items for q in quiet] == [
        ["run started", "state snapshot (49 bytes)", "phase planning"],
        ["state /tokenUsage/inputTokens"],
    ]
    assert quiet[1].events == 3


def test_a_long_run_is_paginated(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    events: list[dict[str, Any]] = [started(run)]
    for i in range(450):
        events += [*streamed_text(f"m{i}", [f"message {i} ", "streamed"]), {"type": "STEP_STARTED", "stepName": "x"}]
    log(run, *events, finished(run))
    first = page_of(operator, run)
    assert "message 0 streamed" in first and "message 250 streamed" not in first
    assert "page 1 of 5" in first
    third = page_of(operator, run, page="3")
    assert "message 250 streamed" in third and "message 0 streamed" not in third


def test_a_live_run_polls_and_a_finished_one_does_not(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.RUNNING)
    log(run, started(run), *streamed_text("m1", ["so ", "far"]))
    live_page = page_of(operator, run)
    assert f'data-poll-url="/admin/threads/run/{run.pk}/timeline/poll/"' in live_page
    version = re.search(r'id="timeline" data-version="(\w+)"', live_page)
    assert version is not None
    poll = operator.get(f"/admin/threads/run/{run.pk}/timeline/poll/")
    assert "no-store" in poll["Cache-Control"]
    assert poll.json() == {"live": True, "version": version.group(1)}

    log(run, finished(run))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED)
    moved = operator.get(f"/admin/threads/run/{run.pk}/timeline/poll/").json()
    assert moved["live"] is False and moved["version"] != version.group(1)
    done_page = page_of(operator, run)
    assert f'data-version="{moved["version"]}"' in done_page
    assert "data-poll-url" not in done_page


def test_a_waiting_run_that_was_continued_is_no_longer_live(operator, thread):
    waited = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.WAITING)
    assert run_timeline(run=waited).live
    Run.objects.create(thread=thread, agui_run_id="r1-continued", parent=waited, status=Run.Status.SUCCEEDED)
    assert not run_timeline(run=waited).live


def test_a_sub_agent_call_links_to_its_board_entry(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    task = SubAgentTask.objects.create(
        id="sub-1", thread=thread, run=run, tool_call_id="call-s", role="researcher", prompt="look", model="m"
    )
    log(run, started(run), *tool_call("call-s", "sub_agent", '{"task": "look"}', "found it"), finished(run))
    page = page_of(operator, run)
    assert f'href="/admin/threads/thread/{thread.pk}/subagents/#task-{task.pk}">sub-agent researcher</a>' in page


def test_the_run_pages_link_to_the_timeline(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    link = f'href="/admin/threads/run/{run.pk}/timeline/"'
    assert link in operator.get(f"/admin/threads/run/{run.pk}/change/").content.decode()
    assert link in operator.get("/admin/threads/run/").content.decode()


def test_the_timeline_needs_the_view_permission(client, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1")
    staff = User.objects.create_user("staff", is_staff=True)
    client.force_login(staff)
    assert client.get(f"/admin/threads/run/{run.pk}/timeline/").status_code == 403
    assert client.get(f"/admin/threads/run/{run.pk}/timeline/poll/").status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_run"))
    client.force_login(User.objects.get(pk=staff.pk))
    assert client.get(f"/admin/threads/run/{run.pk}/timeline/").status_code == 200
    client.logout()
    response = client.get(f"/admin/threads/run/{run.pk}/timeline/poll/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_an_unknown_run_is_a_404(operator, thread):
    assert operator.get("/admin/threads/run/not-a-uuid/timeline/").status_code == 404
    assert operator.get(f"/admin/threads/run/{thread.pk}/timeline/").status_code == 404


def test_a_log_past_the_cap_is_read_from_its_start_and_says_so(operator, thread):
    run = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.SUCCEEDED)
    log(run, started(run), *streamed_text("m1", [f"w{i} " for i in range(100)]), finished(run))
    timeline = run_timeline(run=run, event_cap=50)
    assert (timeline.events_read, timeline.event_count) == (50, 104)
    text = next(e for e in timeline.entries if e.kind == Kind.TEXT)
    assert text.body is not None and text.body.text.endswith("w47 ") and not text.ended
    # The poll's version counts the whole log, so a capped page is not refreshed forever.
    assert timeline.liveness == run_timeline(run=run).liveness
