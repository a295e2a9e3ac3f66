"""The operator's admin: agents, threads with their transcript, runs, and cancelling a run."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from agents.models import Agent
from tests.eventlogs import log_events
from threads.models import Message, Run, SubAgentTask, Thread


@pytest.fixture
def operator(client, transactional_db):
    user = User.objects.create_superuser("operator", "op@example.com", "a-long-password")
    client.force_login(user)
    return client


@pytest.fixture
def run(coder):
    thread = Thread.objects.create(agui_thread_id="t-admin", agent=coder, title="a thread")
    run = Run.objects.create(thread=thread, agui_run_id="r-admin")
    log_events(run, [{"type": "RUN_STARTED"}])
    return run


def test_the_pages_an_operator_uses_render(operator, run):
    SubAgentTask.objects.create(
        id="sub-1", thread=run.thread, run=run, tool_call_id="c", role="tester", prompt="p", model="m"
    )
    for url in (
        "/admin/agents/agent/",
        f"/admin/agents/agent/{run.thread.agent.pk}/change/",
        "/admin/agents/permissionrule/",
        "/admin/threads/thread/",
        f"/admin/threads/thread/{run.thread.pk}/change/",
        f"/admin/threads/thread/{run.thread.pk}/subagents/",
        "/admin/threads/run/",
        f"/admin/threads/run/{run.pk}/change/",
        f"/admin/threads/run/{run.pk}/timeline/",
        "/admin/threads/approval/",
        "/admin/threads/subagenttask/",
        "/admin/threads/subagenttask/sub-1/change/",
    ):
        response = operator.get(url)
        assert response.status_code == 200, url
    assert b"run started" in operator.get(f"/admin/threads/run/{run.pk}/timeline/").content


def test_cancel_from_the_admin_asks_the_run_to_stop(operator, run):
    response = operator.post(
        "/admin/threads/run/", {"action": "cancel_runs", "_selected_action": [str(run.pk)]}, follow=True
    )
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.cancel_requested
    assert b"Asked 1 run(s) to stop" in response.content


def test_the_agent_form_lays_out_model_prompt_grounding_and_limits(operator, coder):
    page = operator.get(f"/admin/agents/agent/{coder.pk}/change/").content.decode()
    headings = re.findall(r"<h2[^>]*>\s*([^<]+?)\s*</h2>", page)
    assert [h for h in headings if h in ("Model", "System prompt", "Grounding", "Limits of a run")] == [
        "Model",
        "System prompt",
        "Grounding",
        "Limits of a run",
    ]
    assert "You are a test agent." in page
    assert "A run that reaches a limit pauses" in page


def test_the_agent_list_counts_threads_and_links_to_them(operator, coder):
    Thread.objects.create(agui_thread_id="t-1", agent=coder)
    Thread.objects.create(agui_thread_id="t-2", agent=coder)
    Agent.objects.create(name="idle", model="claude-test")
    page = operator.get("/admin/agents/agent/").content.decode()
    assert f'<a href="/admin/threads/thread/?agent__id__exact={coder.pk}">2</a>' in page
    assert "claude-test" in page and "(ANTHROPIC_MODEL: " in page


def test_a_thread_shows_its_messages_in_order_as_text_and_tool_calls(operator, run):
    thread = run.thread
    bodies = [
        {"id": "u1", "role": "user", "content": "plan <the> work"},
        {
            "id": "a1",
            "role": "assistant",
            "content": "On it.",
            "toolCalls": [
                {"id": "call-1", "type": "function", "function": {"name": "todo_write", "arguments": '{"todos": []}'}}
            ],
        },
        {"id": "t1", "role": "tool", "content": "todo list updated", "toolCallId": "call-1"},
        {"id": "u2", "role": "user", "content": [{"type": "text", "text": "and this"}, {"type": "image"}]},
    ]
    for position, body in reversed(list(enumerate(bodies))):
        Message.objects.create(thread=thread, position=position, message_id=body["id"], role=body["role"], body=body)
    page = operator.get(f"/admin/threads/thread/{thread.pk}/change/").content.decode()
    assert "plan &lt;the&gt; work" in page
    assert "→ <strong>todo_write</strong> <code>{&quot;todos&quot;: []}</code>" in page
    assert "result of <code>call-1</code>" in page
    assert "and this\n[image]" in page
    order = [page.index(text) for text in ("plan &lt;the&gt; work", "On it.", "todo list updated", "and this")]
    assert order == sorted(order)
    assert 'name="messages-0-body"' not in page  # read-only: no form fields


def test_a_long_thread_shows_its_latest_messages(operator, run):
    thread = run.thread
    Message.objects.bulk_create(
        Message(thread=thread, position=i, message_id=f"m{i}", role="user", body={"role": "user", "content": f"#{i}#"})
        for i in range(250)
    )
    page = operator.get(f"/admin/threads/thread/{thread.pk}/change/").content.decode()
    assert "#49#" not in page and "#50#" in page and "#249#" in page
    assert "Messages (the latest 200, oldest first)" in page


def test_a_thread_links_to_its_runs_and_its_board(operator, run):
    thread = run.thread
    other = Thread.objects.create(agui_thread_id="t-other", agent=thread.agent)
    Run.objects.create(thread=other, agui_run_id="r-other")
    runs = f"/admin/threads/run/?thread__id__exact={thread.pk}"
    page = operator.get(f"/admin/threads/thread/{thread.pk}/change/").content.decode()
    assert f'href="{runs}"' in page
    assert f'href="/admin/threads/thread/{thread.pk}/subagents/"' in page
    listed = operator.get(runs).content.decode()
    assert "r-admin" in listed and "r-other" not in listed


def test_each_row_of_the_thread_list_links_to_its_own_runs_and_board(operator, run):
    other = Thread.objects.create(agui_thread_id="t-other", agent=run.thread.agent)
    page = operator.get("/admin/threads/thread/").content.decode()
    for thread in (run.thread, other):
        runs, board = (
            f"/admin/threads/run/?thread__id__exact={thread.pk}",
            f"/admin/threads/thread/{thread.pk}/subagents/",
        )
        assert f'<a href="{runs}">runs</a> · <a href="{board}">sub-agents</a>' in page


def test_the_thread_list_counts_messages_runs_and_sub_agents(operator, run):
    thread = run.thread
    Run.objects.create(thread=thread, agui_run_id="r-2")
    for i in range(3):
        Message.objects.create(thread=thread, position=i, message_id=f"m{i}", role="user", body={})
    page = operator.get("/admin/threads/thread/").content.decode()
    cells = re.findall(r'<td class="field-(message_count|run_count|subagent_count)">(\d+)</td>', page)
    assert cells == [("message_count", "3"), ("run_count", "2"), ("subagent_count", "0")]


def test_runs_are_not_added_by_hand(operator, run):
    assert operator.get("/admin/threads/run/add/").status_code == 403
    assert operator.get("/admin/threads/thread/add/").status_code == 403


def test_the_admins_static_files_are_served_by_the_asgi_server(server):
    """`make run` has no collectstatic step and no other server for them: the app serves its own
    static files (WhiteNoise, from the apps' folders), the admin's and the API docs' alike."""
    import warnings

    import httpx

    # Under ASGI, Django warns that WhiteNoise's file iterators are synchronous (it serves them all
    # the same); the suite turns warnings into errors, which would break the request in the server.
    with warnings.catch_warnings(record=True), httpx.Client(base_url=server.url, timeout=10) as http:
        warnings.simplefilter("always")
        css = http.get("/static/admin/css/base.css")
        swagger = http.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert b"body" in css.content
    assert swagger.status_code == 200 and len(swagger.content) > 10_000
