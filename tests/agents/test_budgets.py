"""Spend caps (issue #48): per user and per agent, per UTC day and month. A run that would start over a
cap is refused before the model is called; one that crosses a cap stops at its next step, its work
kept; a new day starts afresh. The shared AGUI_TOKEN is one user."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from rest_framework.authtoken.models import Token

from agents.models import Agent, DailySpend, UserBudget
from orchestrator.events import Usage
from orchestrator.pricing import cost_of
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Message, Run, Session, Thread

pytestmark = pytest.mark.clients
MODEL = "claude-sonnet-5-5"  # the tests' model: $3 input, $15 output per million tokens


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _tomorrow() -> str:
    return f"{_today() + dt.timedelta(days=1)}T00:00:00Z"


def _person(name: str) -> tuple[User, str]:
    person = User.objects.create_user(name)
    return person, Token.objects.create(user=person).key


def _error(stream) -> dict:
    assert stream.events[-1]["type"] == "RUN_ERROR", stream.types
    return stream.events[-1]


def test_a_user_over_the_daily_cap_is_refused_before_the_model_is_called(server, fake_api, coder):
    olive, key = _person("olive")
    DailySpend.objects.create(day=_today(), user=olive, agent=coder, cost_usd=1.25)
    fake_api.script([text_turn(["never sent"])])
    with override_settings(BUDGET_USER_DAILY_USD=1.0):
        stream = post_run(server.url, "coder", v1(run_input("t-over", "r1", user("hi"))), token=key)
    server.drain()
    error = _error(stream)
    assert error["code"] == "budget_exceeded"
    assert "the daily budget of user olive ($1.00) is spent: $1.25" in error["message"]
    assert f"resets at {_tomorrow()}" in error["message"]
    assert fake_api.requests == []
    # Refused, not started: nothing of the request was stored.
    assert not Thread.objects.filter(agui_thread_id="t-over").exists()


def test_a_run_that_crosses_the_cap_stops_at_its_next_step_with_its_work_kept(server, fake_api, coder):
    # The first call costs 20,000 input tokens at $3 a million: $0.06, over the $0.05 cap.
    fake_api.script([tool_turn("glob", {"pattern": "*.md"}, input_tokens=20_000, output_tokens=10), text_turn(["no"])])
    with override_settings(BUDGET_USER_DAILY_USD=0.05):
        stream = post_run(server.url, "coder", v1(run_input("t-cross", "r1", user("look"))))
    server.drain()
    error = _error(stream)
    assert error["code"] == "budget_exceeded"
    assert "the daily budget of the shared token ($0.05) is spent" in error["message"]
    assert len(fake_api.requests) == 1  # stopped at the step after the call that crossed it
    # The tool call ran and its result is committed: the work is kept for the next run.
    assert "TOOL_CALL_RESULT" in stream.types
    turns = Session.objects.get(thread__agui_thread_id="t-cross").turns
    assert [turn["role"] for turn in turns] == ["user", "assistant", "user"]
    assert turns[-1]["content"][0]["type"] == "tool_result"
    roles = list(Message.objects.filter(thread__agui_thread_id="t-cross").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool"]
    run = Run.objects.get(thread__agui_thread_id="t-cross")
    assert run.status == Run.Status.FAILED and "daily budget" in run.error
    spent = sum(DailySpend.objects.filter(day=_today(), user=None, agent=coder).values_list("cost_usd", flat=True))
    assert spent == pytest.approx(cost_of(Usage(MODEL, input_tokens=20_000, output_tokens=10)))
    # What is left is shown in the state document: nothing.
    budget = Thread.objects.get(agui_thread_id="t-cross").state["budget"]
    assert budget["leftUsd"] == 0 and budget["exceeded"] is True
    assert budget["caps"][0]["name"] == "user_daily" and budget["caps"][0]["resetsAt"] == _tomorrow()


def test_a_new_utc_day_starts_afresh(server, fake_api, coder):
    DailySpend.objects.create(day=_today() - dt.timedelta(days=1), user=None, agent=coder, cost_usd=9.0)
    fake_api.script([text_turn(["A new day."], input_tokens=1000, output_tokens=10)])
    with override_settings(BUDGET_USER_DAILY_USD=1.0):
        stream = post_run(server.url, "coder", v1(run_input("t-new-day", "r1", user("hi"))))
    server.drain()
    assert stream.events[-1]["type"] == "RUN_FINISHED"
    # Today's spend is a row of its own; yesterday's is kept.
    today = DailySpend.objects.get(day=_today(), user=None, agent=coder)
    assert today.cost_usd == pytest.approx(cost_of(Usage(MODEL, input_tokens=1000, output_tokens=10)))
    assert (today.calls, today.input_tokens, today.output_tokens) == (1, 1000, 10)
    budget = Thread.objects.get(agui_thread_id="t-new-day").state["budget"]
    assert budget["leftUsd"] == pytest.approx(1.0 - today.cost_usd)


def test_an_agents_cap_counts_every_users_spend_and_caps_only_that_agent(server, fake_api, coder):
    olive, key = _person("olive")
    bob, _ = _person("bob")
    helper = Agent.objects.create(name="helper", system_prompt="You help.")
    coder.budget_daily_usd = Decimal("1.00")  # the admin's override of BUDGET_AGENT_DAILY_USD
    coder.save()
    DailySpend.objects.create(day=_today(), user=bob, agent=coder, cost_usd=1.5)
    fake_api.script([text_turn(["The helper answers."])])
    refused = post_run(server.url, "coder", v1(run_input("t-agent-cap", "r1", user("hi"))), token=key)
    answered = post_run(server.url, "helper", v1(run_input("t-agent-free", "r1", user("hi"))), token=key)
    server.drain()
    error = _error(refused)
    assert error["code"] == "budget_exceeded"
    assert "the daily budget of agent coder ($1.00) is spent: $1.50" in error["message"]
    assert answered.events[-1]["type"] == "RUN_FINISHED"
    assert len(fake_api.requests) == 1
    assert helper.spend.get().user == olive


def test_the_agents_monthly_default_cap_resets_at_the_next_month(server, fake_api, coder):
    DailySpend.objects.create(day=_today().replace(day=1), user=None, agent=coder, cost_usd=30.0)
    with override_settings(BUDGET_AGENT_MONTHLY_USD=25.0):
        stream = post_run(server.url, "coder", v1(run_input("t-month", "r1", user("hi"))))
    server.drain()
    error = _error(stream)
    today = _today()
    first = dt.date(today.year + (today.month == 12), today.month % 12 + 1, 1)
    assert "the monthly budget of agent coder ($25.00) is spent: $30.00" in error["message"]
    assert f"resets at {first}T00:00:00Z" in error["message"]
    assert fake_api.requests == []


def test_a_users_own_cap_in_the_admin_overrides_the_default(server, fake_api, coder):
    olive, key = _person("olive")
    UserBudget.objects.create(user=olive, daily_usd=Decimal("5.00"))
    DailySpend.objects.create(day=_today(), user=olive, agent=coder, cost_usd=2.0)
    fake_api.script([text_turn(["Still within yours."])])
    with override_settings(BUDGET_USER_DAILY_USD=1.0):
        stream = post_run(server.url, "coder", v1(run_input("t-own-cap", "r1", user("hi"))), token=key)
    server.drain()
    assert stream.events[-1]["type"] == "RUN_FINISHED"
    assert len(fake_api.requests) == 1
    (cap,) = Thread.objects.get(agui_thread_id="t-own-cap").state["budget"]["caps"]
    assert (cap["name"], cap["limitUsd"], cap["spentUsd"]) == ("user_daily", 5.0, pytest.approx(2.0, abs=0.01))


def test_the_shared_token_is_one_user_across_its_threads(server, fake_api, coder):
    _olive, key = _person("olive")
    fake_api.script([text_turn(["Spent."], input_tokens=20_000, output_tokens=10), text_turn(["Olive's own budget."])])
    with override_settings(BUDGET_USER_DAILY_USD=0.05):
        first = post_run(server.url, "coder", v1(run_input("t-shared-a", "r1", user("hi"))))
        server.drain()
        # Another thread of the shared token: the same user, over the cap.
        second = post_run(server.url, "coder", v1(run_input("t-shared-b", "r1", user("hi"))))
        # A user with a token of their own has a budget of their own.
        olives = post_run(server.url, "coder", v1(run_input("t-olive-own", "r1", user("hi"))), token=key)
    server.drain()
    assert first.events[-1]["type"] == "RUN_FINISHED"
    assert _error(second)["code"] == "budget_exceeded"
    assert "the daily budget of the shared token" in _error(second)["message"]
    assert olives.events[-1]["type"] == "RUN_FINISHED"
    assert len(fake_api.requests) == 2


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_refusal_reaches_both_protocol_versions_clients(server, fake_api, coder, version):
    DailySpend.objects.create(day=_today(), user=None, agent=coder, cost_usd=2.0)
    with override_settings(BUDGET_USER_DAILY_USD=1.0):
        (result,) = run_client(
            version,
            f"{server.url}/agui/coder",
            "test-token",
            [{"threadId": f"t-refused-{version}", "runId": "r1", "messages": [user("hi", "u1")]}],
        )
    server.drain()
    types = [event["type"] for event in result["received"]]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_ERROR"
    error = result["received"][-1]
    assert error["code"] == "budget_exceeded" and "resets at" in error["message"]
    assert fake_api.requests == []


def test_compaction_and_sub_agents_count_on_the_spend(server, fake_api, coder):
    fake_api.script(
        [
            tool_turn("sub_agent", {"task": "CHILD: look around", "role": "reader"}, input_tokens=100),
            tool_turn("file_read", {"path": "README.md"}, input_tokens=900, output_tokens=10),
            text_turn(["It is a demo project."], input_tokens=200, output_tokens=5),
        ]
    )
    # The requests that name the child's task: the child's own, then the summary of the turns that hold it.
    fake_api.script_for(
        "CHILD",
        [
            text_turn(["Nothing to see."], input_tokens=3000, output_tokens=30),
            text_turn(["The user delegated a look around."], input_tokens=700, output_tokens=50),
        ],
    )
    with override_settings(BUDGET_USER_DAILY_USD=100.0, COMPACTION_WINDOW_TOKENS=1000, COMPACTION_AT_SHARE=0.75):
        stream = post_run(server.url, "coder", v1(run_input("t-spend-all", "r1", user("what is this?"))))
    server.drain()
    assert stream.events[-1]["type"] == "RUN_FINISHED"
    assert "compacting" in [e.get("stepName") for e in stream.events]
    usage = Thread.objects.get(agui_thread_id="t-spend-all").state["tokenUsage"]
    row = DailySpend.objects.get(day=_today(), user=None, agent=coder)
    assert row.calls == 5
    assert row.input_tokens == 100 + 900 + 700 + 200 + 3000
    assert row.cost_usd == pytest.approx(usage["cost"])
