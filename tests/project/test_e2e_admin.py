"""The admin in a real headless browser: an operator answers an approval and watches the run go on.

Debian's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``) is driven by
playwright-core from ``tests/clients/admin_approval.mjs``. Without Chromium or
the npm harness the test skips with the reason; with REQUIRE_SERVICES=1 (as CI
sets, after installing Chromium) that is a failure instead.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User

from tests.admin_browser import drive
from tests.helpers import run_input, user, v1
from tests.sse import post_run
from threads.models import Approval, Run

PASSWORD = "a-long-operator-password"


@pytest.fixture
def operator(transactional_db: None) -> User:
    """Staff who may look at runs and answer approvals, and nothing more."""
    made = User.objects.create_user("ops", password=PASSWORD, is_staff=True)
    made.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_run", "view_thread", "view_approval", "change_approval"])
    )
    return made


def test_an_operator_approves_from_the_queue_and_sees_the_run_go_on(browser, server, operator, tmp_path):
    asked = post_run(server.url, "coder", v1(run_input("t-e2e", "r-e2e", user("plan the work"))))
    assert asked.events[-1]["outcome"]["type"] == "interrupt"
    waiting = Run.objects.get(agui_run_id="r-e2e")
    approval = Approval.objects.get(run=waiting)
    assert (waiting.status, approval.tool, approval.decision) == ("waiting", "todo_write", "pending")

    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    seen = drive(
        "admin_approval.mjs",
        {
            "userDataDir": str(profile),
            "baseUrl": server.url,
            "username": "ops",
            "password": PASSWORD,
            "timelinePath": f"/admin/threads/run/{waiting.pk}/timeline/",
            "approvalId": approval.pk,
            "expectText": "The todo list says",
            "screenshot": str(tmp_path / "timeline.png"),
            "timeoutMs": 30_000,
        },
    )
    assert seen["error"] is None, f"failed at: {seen['step']}: {seen['error']}\n{json.dumps(seen, indent=2)}"

    assert "tool call todo_write" in seen["before"] and "Pending" in seen["before"]
    assert "Answered 1 pending approval(s); their runs go on." in seen["message"]
    # The open page followed the run by itself: no reload, and the continued run's events are on it.
    assert seen["sameDocument"] is True
    assert "Run r-e2e-continued" in seen["after"]
    assert "Approved by ops" in seen["after"]
    assert "todo list updated (1/3 completed)" in seen["after"]
    assert seen["consoleErrors"] == []
    assert (tmp_path / "timeline.png").stat().st_size > 0

    server.drain()
    approval.refresh_from_db()
    assert (approval.decision, approval.answered_by) == ("approved", "ops")
    assert Run.objects.get(agui_run_id="r-e2e-continued", parent=waiting).status == Run.Status.SUCCEEDED
