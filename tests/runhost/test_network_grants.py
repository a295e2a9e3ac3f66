"""A host asked for with request_network_access on one process and granted on another, after the
first died: the grant is the thread's, in the database, so the same bash command reaches the host on
the process that goes on (issue #47). Two real ``serve`` processes on PostgreSQL and Redis, as root
with bubblewrap, both @ag-ui/client versions."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, answer_on, ask, started_cluster
from tests.fakes.anthropic_api import text_turn, tool_turn
from tests.fakes.web_site import FakeWeb
from tests.network import HOST

pytestmark = [
    pytest.mark.services,
    pytest.mark.clients,
    pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("curl") is None, reason="needs bwrap and curl"),
]
NETWORK = {"AGENT_BASH_SANDBOX": "on", "AGENT_BASH_NETWORK": "allowlist", "AGENT_BASH_ALLOWED_PRIVATE_HOSTS": HOST}


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The cluster's two processes with bash's network by allowlist, as root in bwrap."""
    yield from started_cluster(tmp_path_factory, "network", **NETWORK)


@pytest.fixture
def networked(cluster: Cluster) -> Cluster:
    cluster.workspace.chmod(0o777)  # the sandbox's user works in it
    return cluster


def _answer(asked: dict, always: bool = False) -> list[dict]:
    payload = {"approved": True, "always": True} if always else {"approved": True}
    return [{"interruptId": i["id"], "status": "resolved", "payload": payload} for i in asked["pendingInterrupts"]]


@pytest.mark.parametrize("version", ["1", "0"])
def test_a_host_granted_on_another_process_after_the_first_died_is_reached(networked: Cluster, version: str) -> None:
    thread_id = f"t-x-net-{version}"
    with FakeWeb(address=HOST) as site:
        curl = {"command": f"curl -sS {site.url('/plain')}"}
        request = {"host": HOST, "reason": "to read the plain page"}
        networked.fake.script(
            [
                tool_turn("bash", curl, id="toolu_first"),
                tool_turn("request_network_access", request, id="toolu_ask"),
                tool_turn("bash", curl, id="toolu_again"),
                text_turn(["Fetched after the crash."]),
            ]
        )
        asked = ask(networked, version, thread_id, text="fetch it")
        assert asked["pendingInterrupts"][0]["toolCallId"] == "toolu_first"
        refused = answer_on(networked.a, version, thread_id, asked, resume=_answer(asked, always=True))
        assert refused["pendingInterrupts"][0]["toolCallId"] == "toolu_ask", refused["received"][-3:]
        first = next(e for e in refused["received"] if e["type"] == "TOOL_CALL_RESULT")
        assert "request_network_access" in first["content"], first
        networked.a.kill()  # kill -9: the question survives only in the database
        answered = answer_on(networked.b, version, thread_id, refused, resume=_answer(refused))
        results = {e["toolCallId"]: e["content"] for e in answered["received"] if e["type"] == "TOOL_CALL_RESULT"}
        assert "granted" in results["toolu_ask"], results
        assert "just text" in results["toolu_again"], results
        assert answered["messages"][-1]["content"] == "Fetched after the crash."
        assert site.requests == ["/plain"]
    grants = networked.query(
        "SELECT s.network_grants FROM threads_session s JOIN threads_thread t ON t.id = s.thread_id "
        "WHERE t.agui_thread_id = %s",
        thread_id,
    )
    assert grants == [([HOST],)]
