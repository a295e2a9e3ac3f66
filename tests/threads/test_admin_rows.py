"""threads/admin/rows.py writes every list of the threads app's admin as Django writes it, byte for
byte: sorted, filtered, searched, and left to Django where it does not cover the list."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import pytest
from django.contrib import admin
from django.contrib.admin.templatetags.admin_list import items_for_result
from django.contrib.auth.models import User
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from django.utils import timezone

from agents.models import Agent
from threads.admin.rows import _columns, list_rows
from threads.models import Approval, Message, QueuedMessage, Run, Session, SubAgentTask, Thread

SPECIAL = "<b>\"quoted\" & 'odd'</b>"


@pytest.fixture
def rows(db: None) -> None:
    """Rows of every list, with what their cells must escape, leave empty or link."""
    now = timezone.now()
    plain = Agent.objects.create(name="coder-rows")
    odd = Agent.objects.create(name=f"agent {SPECIAL}")
    owner = User.objects.create_user(f"owner {SPECIAL}")
    for i, (agent, title, who) in enumerate(((plain, "", None), (odd, SPECIAL, owner), (plain, "a thread", owner))):
        thread = Thread.objects.create(agui_thread_id=f"t-{i}-{SPECIAL}", agent=agent, owner=who, title=title)
        Session.objects.create(thread=thread)
        Message.objects.create(thread=thread, position=0, message_id=f"m-{i}", role="user", body={"content": "hi"})
        run = Run.objects.create(thread=thread, agui_run_id=f"r-{i}", status=Run.Status.WAITING, error=SPECIAL * i)
        Run.objects.create(thread=thread, agui_run_id=f"r-{i}-on", parent=run)
        Approval.objects.create(
            id=f"a-{i}", run=run, tool_call_id=f"c-{i}", tool="bash", message=SPECIAL, expires_at=now + dt.timedelta(1)
        )
        SubAgentTask.objects.create(
            id=f"s-{i}", thread=thread, run=run, tool_call_id=f"c-{i}", role=SPECIAL, prompt="p", model="m"
        )
        QueuedMessage.objects.create(
            thread=thread, message_id=f"q-{i}", agui_run_id=f"r-q-{i}", body={"id": f"q-{i}"}, content=SPECIAL
        )


def _lists_of_the_app() -> list[admin.ModelAdmin]:  # type: ignore[type-arg]
    return [model_admin for model, model_admin in admin.site._registry.items() if model._meta.app_label == "threads"]


def _changelist(model_admin: admin.ModelAdmin, query: str):  # type: ignore[type-arg]
    request = RequestFactory().get(f"/admin/threads/{model_admin.model._meta.model_name}/{query}")
    request.resolver_match = resolve(request.path)  # what the admin keeps the filters by
    request.user = User.objects.create_superuser(f"op-{User.objects.count()}", "op@example.invalid", "pw")
    return model_admin.get_changelist_instance(request)


def _written(rows: Iterable[Iterable[str]]) -> list[str]:
    """Each row as the template writes it: its items one after another."""
    return ["".join(row) for row in rows]


QUERIES = ["", "?o=-2", "?o=3.1", "?q=t-1", "?p=1"]


@pytest.mark.parametrize("query", QUERIES)
def test_every_list_of_the_app_is_written_as_django_writes_it(rows, query):
    covered = []
    for model_admin in _lists_of_the_app():
        cl = _changelist(model_admin, query)
        ours = _written(list_rows(cl))
        djangos = _written(items_for_result(cl, result, None) for result in cl.result_list)
        assert ours == djangos, model_admin
        if _columns(cl) is not None:
            covered.append(model_admin.model.__name__)
    # The lists an operator opens most are written by the columns, not handed back to Django.
    assert {"Thread", "Run"} <= set(covered)


def test_a_filtered_list_links_its_rows_with_the_filters_kept(rows):
    model_admin = admin.site._registry[Thread]
    cl = _changelist(model_admin, f"?agent__id__exact={Agent.objects.get(name='coder-rows').pk}")
    ours = _written(list_rows(cl))
    assert ours == _written(items_for_result(cl, result, None) for result in cl.result_list)
    assert "_changelist_filters=agent__id__exact" in ours[0]


def test_a_popup_list_is_left_to_django(rows):
    model_admin = admin.site._registry[Thread]
    cl = _changelist(model_admin, "?_popup=1&_to_field=id")
    assert _columns(cl) is None or cl.is_popup
    ours = _written(list_rows(cl))
    assert ours == _written(items_for_result(cl, result, None) for result in cl.result_list)
    assert "data-popup-opener" in ours[0]


def test_the_thread_list_page_is_written_with_these_rows(rows, client):
    client.force_login(User.objects.create_superuser("page-op", "op@example.invalid", "pw"))
    page = client.get("/admin/threads/thread/").content.decode()
    thread = Thread.objects.get(title=SPECIAL)
    # Escaped once, in the th that links to the thread, as Django writes it.
    assert (
        f'<th class="field-agui_thread_id"><a href="/admin/threads/thread/{thread.pk}/change/">'
        "t-1-&lt;b&gt;&quot;quoted&quot; &amp; &#x27;odd&#x27;&lt;/b&gt;</a></th>"
    ) in page


LISTS_AND_WHAT_THEY_LEAVE_OUT = [
    ("thread", ['"threads_thread"."state"', '"agents_agent"."mcp_servers"', '"agents_agent"."system_prompt"']),
    ("session", ['"threads_session"."turns"', '"threads_thread"."state"']),
    ("run", ['"threads_run"."checkpoint"', '"threads_run"."client_answers"', '"threads_thread"."state"']),
]


@pytest.mark.parametrize(("model", "left_out"), LISTS_AND_WHAT_THEY_LEAVE_OUT)
def test_a_list_reads_no_document_it_does_not_show(rows, client, model, left_out):
    """A thread's state, a session's turns and a run's checkpoint can each run to megabytes: a list
    of 100 rows read them all to show none. Nor is any of them read afterwards, row by row."""
    Thread.objects.update(state={"big": "x" * 100_000})
    Session.objects.update(turns=[{"role": "user", "content": "y" * 100_000}])
    Run.objects.update(checkpoint={"turns": "z" * 100_000})
    client.force_login(User.objects.create_superuser("lean-op", "op@example.invalid", "pw"))
    with CaptureQueriesContext(connection) as few:
        assert client.get(f"/admin/threads/{model}/").status_code == 200
    rows_read = [query["sql"] for query in few.captured_queries if f'FROM "threads_{model}"' in query["sql"]]
    rows_read = [sql for sql in rows_read if not sql.startswith("SELECT COUNT(*)")]  # the rows, not their count
    assert len(rows_read) == 1 and '"threads_thread"."agui_thread_id"' in rows_read[0]
    for column in left_out:
        assert column not in rows_read[0]
    # Three times the rows, the same queries: nothing left out is read per row afterwards.
    for extra in range(6):
        thread = Thread.objects.create(agui_thread_id=f"more-{extra}", agent=Agent.objects.get(name="coder-rows"))
        Session.objects.create(thread=thread)
        Run.objects.create(thread=thread, agui_run_id=f"more-{extra}")
    with CaptureQueriesContext(connection) as more:
        page = client.get(f"/admin/threads/{model}/")
    assert page.status_code == 200 and page.content.count(b'class="action-select"') >= 9
    assert len(more.captured_queries) == len(few.captured_queries)


def test_the_thread_list_writes_its_checkbox_and_its_dates_once_a_page(rows):
    """The cells looked up once a page (rows.py _Page) are the thread list's: its checkbox and its
    updated_at, still written as Django writes them (the test above)."""
    kinds = {column.name: column.kind for column in _columns(_changelist(admin.site._registry[Thread], "")) or []}
    assert kinds["action_checkbox"] == "checkbox" and kinds["updated_at"] == "datetime"
