"""An agent's own hosts for bash's network (issue #47, item 2): edited on its admin page, checked
there, and read by the proxy at each command: the agent's allowed hosts add to AGENT_BASH_ALLOWED_HOSTS,
its denied hosts win over every allow list and every grant of a thread. As root in bwrap."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agents.models import Agent
from agents.runtime import tool_context
from agents.workspaces import hand_over
from orchestrator.tools.base import ToolOutput, ToolRegistry
from orchestrator.tools.egress import parse_host_headers, parse_host_pattern
from orchestrator.tools.mutating import BASH
from runhost.network import RunNetwork, grant_to_thread
from tests.fakes.web_site import FakeWeb
from tests.network import HOST
from threads.models import NetworkUse, Run, Session, Thread

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("curl") is None, reason="needs bwrap and curl"
)


def _agent_form(agent: Agent, **fields: str) -> dict[str, Any]:
    return {
        "name": agent.name,
        "description": "",
        "enabled": "on",
        "model": "",
        "max_tokens": agent.max_tokens,
        "thinking_budget": 0,
        "system_prompt": agent.system_prompt,
        "environment_block": "on",
        "grounding_mode": agent.grounding_mode,
        "max_iterations": agent.max_iterations,
        "max_run_seconds": agent.max_run_seconds,
        "token_budget": 0,
        "budget_daily_usd": "",
        "budget_monthly_usd": "",
        "bash_allowed_hosts": "",
        "bash_denied_hosts": "",
        **fields,
    }


def test_an_agents_hosts_are_edited_on_its_page_and_a_bad_entry_refused(operator, coder):
    page = operator.get(f"/admin/agents/agent/{coder.pk}/change/")
    assert b"bash_allowed_hosts" in page.content and b"bash_denied_hosts" in page.content
    url = f"/admin/agents/agent/{coder.pk}/change/"
    refused = operator.post(url, _agent_form(coder, bash_allowed_hosts="https://pypi.org/simple"))
    assert refused.status_code == 200 and b"write a host (and :port), not a URL" in refused.content
    assert Agent.objects.get(pk=coder.pk).bash_allowed_hosts == ""
    saved = operator.post(url, _agent_form(coder, bash_allowed_hosts="pypi.org\n*.pythonhosted.org:443"))
    assert saved.status_code == 302, saved.content.decode()[-2000:]
    assert Agent.objects.get(pk=coder.pk).host_lists()[0] == (
        parse_host_pattern("pypi.org"),
        parse_host_pattern("*.pythonhosted.org:443"),
    )


@pytest.fixture
def site() -> Iterator[FakeWeb]:
    with FakeWeb(address=HOST) as web:
        yield web


@pytest.fixture
def run(transactional_db: None, coder: Agent, tmp_path: Path) -> Iterator[Run]:
    root = tmp_path / "ws"
    root.mkdir()
    with override_settings(
        AGENT_WORKSPACE=root,
        DATA_DIR=tmp_path,
        AGENT_BASH_SANDBOX="on",
        AGENT_BASH_NETWORK="allowlist",
        AGENT_BASH_ALLOWED_PRIVATE_HOSTS=frozenset({HOST}),
    ):
        hand_over(root)
        thread = Thread.objects.create(agent=coder, agui_thread_id="t-agent-hosts")
        Session.objects.create(thread=thread)
        yield Run.objects.create(thread=thread, agui_run_id="r1")


def _bash(run: Run, command: str) -> ToolOutput:
    context = tool_context(agent_name="coder", thread_id="t-agent-hosts")
    session = Session.objects.get(thread_id=run.thread_id)
    context.network = RunNetwork(agent_id=run.thread.agent_id, agent_name="coder", session_id=session.pk, run_pk=run.pk)
    return asyncio.run(ToolRegistry.of([BASH]).call("bash", {"command": command}, context, call_id="toolu_x"))


def test_the_agents_allowed_hosts_are_reached_and_its_denied_hosts_win_over_a_grant(run, site, coder):
    curl = f"curl -sS {site.url('/plain')}"
    assert "request_network_access" in _bash(run, curl).content  # neither the settings nor the agent list it
    coder.bash_allowed_hosts = HOST
    coder.save()
    assert "just text" in _bash(run, curl).content
    coder.bash_denied_hosts = HOST
    coder.save()
    grant_to_thread(session_id=Session.objects.get(thread_id=run.thread_id).pk, pattern=parse_host_pattern(HOST))
    denied = _bash(run, curl).content
    assert "the operator denies it" in denied and "no approval can let it through" in denied, denied
    assert site.requests == ["/plain"]
    uses = list(NetworkUse.objects.filter(run=run).values_list("allowed", "tool_call_id"))
    assert uses == [(False, "toolu_x"), (True, "toolu_x"), (False, "toolu_x")]


SECRET = "registry-token-0123456789"


def test_the_operators_header_reaches_its_host_over_plain_http_and_never_the_sandbox(run, site, coder):
    """Per-host credential headers (item 4): added by the proxy to plain-HTTP requests to that host
    only, replacing what the command sent; not in bash's environment, output or the run's records."""
    coder.bash_allowed_hosts = f"{HOST}\n127.0.0.3"
    coder.save()
    headers = {HOST: {"Authorization": f"Bearer {SECRET}"}}
    with (
        FakeWeb(address="127.0.0.3") as other,
        override_settings(
            AGENT_BASH_NETWORK_HEADERS=parse_host_headers(json.dumps(headers)),
            AGENT_BASH_ALLOWED_PRIVATE_HOSTS=frozenset({HOST, "127.0.0.3"}),
        ),
    ):
        out = _bash(
            run,
            f"curl -sS -H 'Authorization: Bearer mine' {site.url('/plain')}; curl -sS {other.url('/plain')}; "
            "env; cat /proc/self/environ; ls -a /run/threadline",
        ).content
    assert site.authorizations == [f"Bearer {SECRET}"]  # the command's own header was replaced
    assert other.authorizations == [""]  # another host gets nothing
    assert out.count("just text") == 2
    assert SECRET not in out
    stored = list(NetworkUse.objects.filter(run=run).values_list("host", "reason"))
    assert len(stored) == 2 and SECRET not in repr(stored)
    assert SECRET not in repr(tool_context().workspace.sandbox)


def test_a_granted_loopback_or_metadata_address_stays_out_of_reach(run, listener):
    """A hostile model's request approved by a careless person: the grant widens the lists only,
    never the address checks (loopback, where the database listens, and the cloud metadata address)."""
    listener_port = listener.getsockname()[1]
    session = Session.objects.get(thread_id=run.thread_id)
    for host in ("127.0.0.1", "169.254.169.254", "localhost"):
        grant_to_thread(session_id=session.pk, pattern=parse_host_pattern(host))
    out = _bash(
        run,
        # --noproxy '': through the proxy even for loopback names (without it curl tries the sandbox's own
        # loopback, where nothing listens).
        f"curl -sS -m 5 --noproxy '' http://127.0.0.1:{listener_port}/; "
        "curl -sS -m 5 --noproxy '' http://169.254.169.254/latest/meta-data/; "
        f"curl -sS -m 5 --noproxy '' http://localhost:{listener_port}/",
    ).content
    assert out.count("Threadline's network proxy refused") == 3, out
    assert list(NetworkUse.objects.filter(run=run).values_list("allowed", flat=True)) == [False, False, False]
    assert not _accepted(listener)


def _accepted(sock: socket.socket) -> bool:
    try:
        sock.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port on the host's loopback standing for the database's."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()
