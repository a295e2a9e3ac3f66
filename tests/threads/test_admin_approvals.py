"""The approvals queue in the admin: pending first, answered through the service, only by who may change."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from agents.models import Agent
from threads import leases
from threads.models import Approval, Run, Thread

QUEUE = "/admin/threads/approval/"


@pytest.fixture
def run(db: None) -> Run:
    thread = Thread.objects.create(agui_thread_id="t-queue", agent=Agent.objects.create(name="coder-queue"))
    # Held by this (live) process, as a run waiting for an answer is.
    return Run.objects.create(
        thread=thread,
        agui_run_id="r-queue",
        status=Run.Status.WAITING,
        owner=leases.owner_id(),
        lease_expires_at=leases.lease_until(),
    )


def asked(run: Run, approval_id: str, tool: str = "bash", **fields: object) -> Approval:
    return Approval.objects.create(
        id=approval_id,
        run=run,
        tool_call_id=f"call-{approval_id}",
        tool=tool,
        message=f"Allow {tool}?",
        expires_at=timezone.now() + dt.timedelta(minutes=10),
        **fields,
    )


def staff(client: Client, *codenames: str) -> Client:
    made = User.objects.create_user("staff", is_staff=True)
    made.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(made)
    return client


def test_pending_approvals_come_first_with_their_thread_and_timeline(client, run):
    asked(run, "old-answered", decision=Approval.Decision.APPROVED)
    asked(run, "pending-one", tool="file_write")
    page = staff(client, "view_approval", "change_approval").get(QUEUE).content.decode()
    assert page.index(f"{QUEUE}pending-one/change/") < page.index(f"{QUEUE}old-answered/change/")
    assert "t-queue" in page
    assert f'<a href="/admin/threads/run/{run.pk}/timeline/">r-queue</a>' in page


def test_a_denial_from_the_queue_records_who_and_why(client, run):
    asked(run, "a-1")
    asked(run, "a-2", decision=Approval.Decision.TIMEOUT)
    response = staff(client, "view_approval", "change_approval").post(
        QUEUE, {"action": "deny", "_selected_action": ["a-1", "a-2"]}, follow=True
    )
    assert b"Answered 1 pending approval(s)" in response.content
    denied = Approval.objects.get(pk="a-1")
    assert (denied.decision, denied.answered_by, denied.reason) == ("denied", "staff", "denied by staff in the admin")
    assert Approval.objects.get(pk="a-2").decision == Approval.Decision.TIMEOUT  # an answer is final


def test_staff_who_may_only_look_cannot_answer(client, run):
    asked(run, "a-1")
    viewer = staff(client, "view_approval")
    page = viewer.get(QUEUE).content.decode()
    assert f"{QUEUE}a-1/change/" in page and 'value="approve"' not in page
    viewer.post(QUEUE, {"action": "approve", "_selected_action": ["a-1"]})
    assert Approval.objects.get(pk="a-1").decision == Approval.Decision.PENDING


def test_approvals_are_not_added_by_hand(client, run):
    assert staff(client, "view_approval", "add_approval").get(f"{QUEUE}add/").status_code == 403


def test_an_approval_whose_run_has_ended_is_closed_not_answered(client, run):
    """The run that asked was cancelled (or superseded) meanwhile: an answer would reach nobody."""
    Run.objects.filter(pk=run.pk).update(status=Run.Status.CANCELLED)
    asked(run, "orphan")
    operator = staff(client, "view_approval", "change_approval")
    page = operator.post(QUEUE, {"action": "approve", "_selected_action": ["orphan"]}, follow=True).content.decode()
    assert "Answered 0 pending approval(s)" in page
    assert "1 approval(s) were closed instead: the run that asked has ended" in page
    closed = Approval.objects.get(pk="orphan")
    assert (closed.decision, closed.reason) == (
        "cancelled",
        "the run that asked has ended: it no longer waits for this answer",
    )


def test_an_answer_counts_though_the_process_that_asked_is_gone(client, run):
    """A waiting run is held by no process: the answer is recorded and the run is due for the sweep."""
    Run.objects.filter(pk=run.pk).update(owner="another-host:4242", lease_expires_at=timezone.now())
    asked(run, "kept")
    operator = staff(client, "view_approval", "change_approval")
    page = operator.post(QUEUE, {"action": "approve", "_selected_action": ["kept"]}, follow=True).content.decode()
    assert "Answered 1 pending approval(s)" in page
    assert Approval.objects.get(pk="kept").decision == "approved"
    run.refresh_from_db()
    assert run.status == Run.Status.WAITING and run.wait_deadline is not None and run.wait_deadline <= timezone.now()
