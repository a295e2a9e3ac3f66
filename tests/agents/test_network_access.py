"""The agent asks for a host bash's proxy refused (issue #47): ``request_network_access`` is answered
as an approval with the permissions a new user starts with, and after "yes" the same command reaches
the host, in that thread only; "yes, always" adds the host to the agent's own list.

As root with bubblewrap, as the other sandbox tests. The "host" is a loopback server on 127.0.0.2
that the operator lets through the address checks (AGENT_BASH_ALLOWED_PRIVATE_HOSTS), as in
tests/agents/test_bash_network.py; nothing lists it as allowed, so the proxy refuses it until a grant."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.authtoken.models import Token

from agents.models import Agent
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.fakes.web_site import FakeWeb
from tests.helpers import eventually, run_input, user, v1
from tests.metrics import delta, samples
from tests.network import HOST, YES, YES_ALWAYS, answered_chat, tool_results
from tests.network import allowlist as bash_allowlist
from tests.sse import post_run
from threads.models import Approval, NetworkUse, Session

pytestmark = [
    pytest.mark.clients,
    pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("curl") is None, reason="needs bwrap and curl"),
]
VERSIONS = ["1", "0"]


@pytest.fixture
def site() -> Iterator[FakeWeb]:
    with FakeWeb(address=HOST) as web:
        yield web


@pytest.fixture
def allowlist(workspace: Any) -> Iterator[None]:
    with bash_allowlist():
        yield


def _curl(site: FakeWeb) -> dict[str, str]:
    return {"command": f"curl -sS {site.url('/plain')}"}


def _script(fake_api: Any, site: FakeWeb, *, retry: bool = True) -> None:
    request = {"host": HOST, "port": int(site.base_url.rsplit(":", 1)[1]), "reason": "to fetch the plain page"}
    fake_api.script(
        [
            tool_turn("bash", _curl(site), id="toolu_first"),
            tool_turn("request_network_access", request, id="toolu_ask"),
            *([tool_turn("bash", _curl(site), id="toolu_again")] if retry else []),
            text_turn(["Fetched."]),
        ]
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_refused_host_asked_for_and_approved_is_reached_by_the_same_command(
    server, fake_api, allowlist, site, version
):
    _script(fake_api, site)
    # bash asks (a change); "always" for it, so the retry of the same command runs unasked.
    results = answered_chat(server, version, f"t-net-{version}", YES_ALWAYS, YES)
    outputs = tool_results(results)
    assert "403" in outputs["toolu_first"] or "refused" in outputs["toolu_first"], outputs["toolu_first"]
    assert "request_network_access" in outputs["toolu_first"]
    assert "granted" in outputs["toolu_ask"], outputs["toolu_ask"]
    assert "just text" in outputs["toolu_again"], outputs["toolu_again"]
    assert site.requests == ["/plain"]
    (asked,) = Approval.objects.filter(tool="request_network_access")
    assert asked.decision == Approval.Decision.APPROVED
    port = site.base_url.rsplit(":", 1)[1]
    assert Session.objects.get(thread__agui_thread_id=f"t-net-{version}").network_grants == [f"{HOST}:{port}"]
    assert Agent.objects.get(name="coder").bash_allowed_hosts == ""  # "yes" is for the thread only
    uses = list(NetworkUse.objects.filter(run__thread__agui_thread_id=f"t-net-{version}").order_by("id"))
    assert [(use.allowed, use.tool_call_id) for use in uses] == [(False, "toolu_first"), (True, "toolu_again")]
    assert uses[1].bytes_received > 0 and uses[1].bytes_sent > 0


def test_a_grant_for_one_thread_does_not_reach_another(server, fake_api, allowlist, site):
    _script(fake_api, site)
    answered_chat(server, "1", "t-net-granted", YES_ALWAYS, YES)
    assert site.requests == ["/plain"]
    # Another thread (another user's or the same one's): the same command is refused there.
    fake_api.script([tool_turn("bash", _curl(site), id="toolu_other"), text_turn(["No."])])
    outputs = tool_results(answered_chat(server, "1", "t-net-other", YES))
    assert "request_network_access" in outputs["toolu_other"], outputs["toolu_other"]
    assert site.requests == ["/plain"]


def test_no_grants_nothing(server, fake_api, allowlist, site):
    _script(fake_api, site)
    no = {"status": "resolved", "payload": {"approved": False}}
    outputs = tool_results(answered_chat(server, "0", "t-net-no", YES_ALWAYS, no))
    assert "denied" in outputs["toolu_ask"], outputs["toolu_ask"]
    assert "request_network_access" in outputs["toolu_again"]
    assert site.requests == []
    assert Session.objects.get(thread__agui_thread_id="t-net-no").network_grants == []


def test_yes_always_adds_the_host_to_the_agents_list(server, fake_api, allowlist, site):
    _script(fake_api, site)
    answered_chat(server, "1", "t-net-always", YES_ALWAYS, YES_ALWAYS)
    port = site.base_url.rsplit(":", 1)[1]
    assert Agent.objects.get(name="coder").bash_allowed_hosts == f"{HOST}:{port}"
    fake_api.script([tool_turn("bash", _curl(site), id="toolu_later"), text_turn(["Yes."])])
    outputs = tool_results(answered_chat(server, "1", "t-net-later", YES))
    assert "just text" in outputs["toolu_later"], outputs["toolu_later"]


def test_a_runs_network_use_is_on_its_admin_page_and_counted_in_metrics(server, fake_api, allowlist, site):
    operator = Client()
    operator.force_login(User.objects.create_superuser("operator", "op@example.com", None))

    _script(fake_api, site)
    before = samples(server)
    answered_chat(server, "1", "t-net-seen", YES_ALWAYS, YES)
    after = samples(server)
    allowed = {"agent": "coder", "outcome": "allowed"}
    assert delta(before, after, "threadline_bash_network_connections_total", **allowed) == 1
    assert delta(before, after, "threadline_bash_network_connections_total", agent="coder", outcome="refused") == 1
    received = delta(before, after, "threadline_bash_network_bytes_total", agent="coder", direction="received")
    (use,) = NetworkUse.objects.filter(run__thread__agui_thread_id="t-net-seen", allowed=True)
    assert received == use.bytes_received > 0
    refused = NetworkUse.objects.get(run__thread__agui_thread_id="t-net-seen", allowed=False)
    page = operator.get(f"/admin/threads/run/{refused.run_id}/change/").content.decode()
    assert "network use (connections through Threadline" in page
    assert HOST in page and "request_network_access" in page  # the refusal's reason says how to ask


def test_a_host_approved_always_through_the_rest_api_joins_the_agents_list(server, fake_api, allowlist, site):
    request = {"host": HOST, "reason": "to fetch the plain page"}
    fake_api.script([tool_turn("request_network_access", request, id="toolu_ask"), text_turn(["Asked."])])
    asked = post_run(server.url, "coder", v1(run_input("t-net-api", "r1", user("fetch"))))
    (interrupt,) = asked.events[-1]["outcome"]["interrupts"]
    assert interrupt["toolCallId"] == "toolu_ask"
    assert "Let bash reach 127.0.0.2 (any port)" in interrupt["message"], interrupt
    staff = User.objects.create_user("ops", password="a-long-password", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="change_approval"))
    answered = httpx.post(
        f"{server.url}/api/approvals/{interrupt['id']}/answer",
        headers={"Authorization": f"Token {Token.objects.create(user=staff).key}"},
        json={"approved": True, "always": True},
        timeout=10,
    )
    assert answered.status_code == 200, answered.text
    eventually(
        lambda: Session.objects.get(thread__agui_thread_id="t-net-api").network_grants == [HOST],
        what="the grant the run that went on recorded",
    )
    server.drain()
    assert Agent.objects.get(name="coder").bash_allowed_hosts == HOST


def test_arguments_that_name_no_host_are_refused_without_asking(server, fake_api, allowlist):
    bad = {"host": "https://pypi.org/simple", "reason": "packages"}
    fake_api.script([tool_turn("request_network_access", bad, id="toolu_bad"), text_turn(["Sorry."])])
    done = post_run(server.url, "coder", v1(run_input("t-net-bad", "r1", user("fetch"))))
    assert done.events[-1]["type"] == "RUN_FINISHED", done.events[-1]
    assert done.events[-1]["outcome"] == {"type": "success"}  # not an interrupt: nobody was asked
    result = next(e for e in done.events if e["type"] == "TOOL_CALL_RESULT")
    assert "not asked" in result["content"] and "not a URL" in result["content"], result
    assert Approval.objects.count() == 0
