"""Each answer to an approval is counted once in /metrics, whichever way it closes: answered,
superseded by a new message, timed out by the sweep, expired and closed by a new message, or
cancelled with its run (issue #42)."""

from __future__ import annotations

from typing import Any

import httpx
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.helpers import eventually, run_input, user, v1
from tests.sse import post_run
from threads.models import Approval, Run

WRITE = {"path": "notes.txt", "content": "counted once\n"}
DECISIONS = ("yes", "yes_always", "no", "no_with_reason", "timeout", "cancelled", "superseded")


def _counts(server: Any) -> dict[str, float]:
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer test-token"})
    assert response.status_code == 200
    counts = dict.fromkeys(DECISIONS, 0.0)
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == "threadline_approvals_total" and sample.labels.get("tool") == "file_write":
                counts[sample.labels["decision"]] += sample.value
    return counts


def _ask(server: Any, thread_id: str) -> dict[str, Any]:
    asked = post_run(server.url, "coder", v1(run_input(thread_id, "r1", user("note it", "u1"))))
    assert asked.events[-1]["outcome"]["type"] == "interrupt"
    return asked


def _added(server: Any, before: dict[str, float]) -> dict[str, float]:
    server.drain()
    after = _counts(server)
    return {
        decision: after[decision] - before[decision] for decision in DECISIONS if after[decision] != before[decision]
    }


def _write_again(server: Any, thread_id: str, asked: Any) -> None:
    history = [m for m in asked.events if m["type"] == "MESSAGES_SNAPSHOT"][-1]["messages"]
    again = post_run(server.url, "coder", v1(run_input(thread_id, "r2", *history, user("never mind", "u2"))))
    assert again.types[-1] == "RUN_FINISHED"


def test_an_approved_call_is_counted_once(server, fake_api):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Noted."])])
    before = _counts(server)
    asked = _ask(server, "t-count-yes")
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    resume = {"resume": [{"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}]}
    post_run(server.url, "coder", v1(run_input("t-count-yes", "r1", **resume)))
    assert _added(server, before) == {"yes": 1}


def test_an_approval_superseded_by_a_new_message_is_counted_once(server, fake_api):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Not written."])])
    before = _counts(server)
    asked = _ask(server, "t-count-superseded")
    _write_again(server, "t-count-superseded", asked)
    assert Approval.objects.get().decision == Approval.Decision.SUPERSEDED
    assert _added(server, before) == {"superseded": 1}


def test_an_approval_nobody_answered_is_counted_once_when_the_sweep_times_it_out(server, fake_api):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Not written."])])
    before = _counts(server)
    with override_settings(APPROVAL_TIMEOUT_SECONDS=0.3):
        _ask(server, "t-count-timeout")
    eventually(
        lambda: Run.objects.filter(agui_run_id="r1-continued", finished_at__isnull=False).exists(),
        what="the sweep to go on with the expired run",
    )
    assert Approval.objects.get().decision == Approval.Decision.TIMEOUT
    assert _added(server, before) == {"timeout": 1}


def test_an_expired_approval_closed_by_a_new_message_is_counted_once(server, fake_api):
    from runhost.host import HOST

    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Not written."])])
    before = _counts(server)
    server.call(_stopped(HOST.stop_sweeper))  # so the message, not the sweep, finds the deadline passed
    with override_settings(APPROVAL_TIMEOUT_SECONDS=0.05):
        asked = _ask(server, "t-count-expired")
    eventually(lambda: Approval.objects.get().expires_at is not None and _past(Approval.objects.get()))
    _write_again(server, "t-count-expired", asked)
    assert Approval.objects.get().decision == Approval.Decision.TIMEOUT
    assert _added(server, before) == {"timeout": 1}


def test_an_approval_cancelled_with_its_run_is_counted_once(server, fake_api):
    fake_api.script([tool_turn("file_write", WRITE, id="toolu_write"), text_turn(["Not written."])])
    before = _counts(server)
    _ask(server, "t-count-cancel")
    cancelled = httpx.post(
        f"{server.url}/agui/coder/threads/t-count-cancel/runs/r1/cancel",
        headers={"Authorization": "Bearer test-token"},
    )
    assert cancelled.status_code == 202, cancelled.text
    assert Approval.objects.get().decision == Approval.Decision.CANCELLED
    assert _added(server, before) == {"cancelled": 1}


async def _stopped(stop: Any) -> None:
    stop()


def _past(approval: Approval) -> bool:
    from django.utils import timezone

    return approval.expires_at <= timezone.now()
