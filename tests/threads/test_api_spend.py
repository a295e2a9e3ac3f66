"""GET /api/spend/: what was spent per user and per UTC day (issue #48); staff see everyone's, a user
their own."""

from __future__ import annotations

import datetime as dt

import pytest

from agents.models import DailySpend
from tests import api_world as world

DAY = dt.date(2026, 11, 30)


@pytest.fixture
def people(db):
    return world.People.create()


@pytest.fixture
def spend(people):
    coder, helper = world.agent("coder"), world.agent("helper")
    for day, who, agent, cost in [
        (DAY, people.owner.user, coder, 1.0),
        (DAY, people.owner.user, helper, 0.5),  # the same user and day, another agent: one row in the API
        (DAY - dt.timedelta(days=1), people.owner.user, coder, 2.0),
        (DAY, people.stranger.user, coder, 4.0),
        (DAY, None, coder, 8.0),  # the shared AGUI_TOKEN
    ]:
        DailySpend.objects.create(day=day, user=who, agent=agent, cost_usd=cost, calls=1, input_tokens=10)


def _rows(response):
    assert response.status_code == 200, response.content
    return [(row["day"], row["username"], row["costUsd"], row["calls"]) for row in response.json()["results"]]


def test_a_user_sees_their_own_spend_per_day_every_agent_together(people, spend):
    assert _rows(people.owner.get("spend/")) == [("2026-11-30", "olive", 1.5, 2), ("2026-11-29", "olive", 2.0, 1)]


def test_staff_see_everyones_the_shared_tokens_as_the_user_null(people, spend):
    rows = _rows(people.staff.get("spend/", since="2026-11-30"))
    assert sorted(rows, key=lambda row: row[2]) == [
        ("2026-11-30", "olive", 1.5, 2),
        ("2026-11-30", "stan", 4.0, 1),
        ("2026-11-30", None, 8.0, 1),
    ]
    shared = [row for row in people.staff.get("spend/").json()["results"] if row["userId"] is None]
    assert len(shared) == 1


def test_filters_by_agent_user_and_days(people, spend):
    assert _rows(people.staff.get("spend/", agent="helper")) == [("2026-11-30", "olive", 0.5, 1)]
    assert _rows(people.staff.get("spend/", user="stan")) == [("2026-11-30", "stan", 4.0, 1)]
    assert _rows(people.owner.get("spend/", until="2026-11-29")) == [("2026-11-29", "olive", 2.0, 1)]
    # A user's filter by another user changes nothing: they see only their own.
    assert _rows(people.owner.get("spend/", user="stan", since="2026-11-30")) == [("2026-11-30", "olive", 1.5, 2)]


def test_a_bad_day_or_an_unknown_parameter_is_a_400_and_anonymous_a_401(people, spend):
    assert people.owner.get("spend/", since="yesterday").status_code == 400
    assert people.owner.get("spend/", from_day="2026-11-30").status_code == 400
    assert people.anonymous.get("spend/").status_code == 401
