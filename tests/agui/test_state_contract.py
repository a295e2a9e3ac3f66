"""The state document's JSON Pointer paths are the contract: every path the
seed names resolves, in a real document, to the seed's meaning and type, in the server's copy and in
the copy the official client built from STATE_SNAPSHOT and STATE_DELTA."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings
from jsonpointer import resolve_pointer

from orchestrator.verdict import VERDICTS, conclusion_of, parse_verdict
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn, tool_use, turn
from threads.models import Session, SubAgentTask, Thread

pytestmark = pytest.mark.clients


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# Every pointer the seed's StateDoc (and the types it embeds) names, with what its value must be.
SEED_POINTERS: dict[str, Any] = {
    "/thread": _text,
    "/session": _text,
    "/agent": _text,
    "/model": lambda v: isinstance(v, dict),
    "/model/id": _text,
    "/model/name": _text,
    "/model/provider": _text,
    "/model/contextWindow": _count,
    "/todos": lambda v: isinstance(v, list),
    "/tokenUsage": lambda v: isinstance(v, dict),
    "/tokenUsage/promptTokens": _count,
    "/tokenUsage/completionTokens": _count,
    "/tokenUsage/contextWindow": _count,
    "/tokenUsage/estimated": lambda v: isinstance(v, bool),
    "/tokenUsage/cacheReadTokens": _count,
    "/tokenUsage/cacheWriteTokens": _count,
    "/tokenUsage/reasoningTokens": _count,
    "/tokenUsage/cost": lambda v: isinstance(v, int | float) and v >= 0,
    "/files": lambda v: isinstance(v, list),
    "/files/0/path": _text,
    "/files/0/name": _text,
    "/files/0/action": lambda v: v in ("read", "write", "edit", "patch"),
    "/subAgents": lambda v: isinstance(v, list),
    "/subAgents/0/id": _text,
    "/subAgents/0/status": _text,
    "/subAgents/0/role": _text,
    "/subAgents/0/prompt": _text,
    "/subAgents/0/model": _text,
    "/subAgents/0/error": _text,
    "/subAgents/0/conclusion": lambda v: v in VERDICTS,
    "/subAgents/0/summary": _text,
    "/client": lambda v: isinstance(v, dict),
}


def test_every_path_the_seed_names_resolves_in_a_real_document(server, fake_api, workspace):
    fake_api.script(
        [
            turn(
                tool_use("file_read", {"path": "README.md"}, id="toolu_read"),
                tool_use("sub_agent", {"task": "CHILD: check main", "role": "checker"}, id="toolu_sub"),
            ),
            text_turn(["All done."], input_tokens=70, output_tokens=9),
        ]
    )
    fake_api.script_for("CHILD", [text_turn(["main is fine, tests missing.\n\nConclusion: partial"])])
    body = {
        "threadId": "t-contract",
        "runId": "r1",
        "state": {"page": "editor"},
        "messages": [{"id": "u1", "role": "user", "content": "check it"}],
    }
    with override_settings(AGENT_MUTATING_TOOLS="on"):
        (result,) = run_client("1", f"{server.url}/agui/coder", "test-token", [body])
    server.drain()
    assert result["error"] is None, result["error"]
    thread = Thread.objects.get(agui_thread_id="t-contract")
    client_doc, server_doc = result["state"], thread.state
    assert client_doc == server_doc
    for pointer, meets in SEED_POINTERS.items():
        for doc in (client_doc, server_doc):
            value = resolve_pointer(doc, pointer)
            assert meets(value), f"{pointer} = {value!r}"
    # And each means what the seed says it means.
    session = Session.objects.get(thread=thread)
    assert (server_doc["thread"], server_doc["session"], server_doc["agent"]) == (
        "t-contract",
        str(session.pk),
        "coder",
    )
    assert server_doc["title"] == "check it"
    usage = server_doc["tokenUsage"]
    spent = session.input_tokens + session.cache_read_tokens + session.cache_write_tokens
    assert usage["totalPromptTokens"] == spent and usage["totalCompletionTokens"] == session.output_tokens
    # The seed's promptTokens is the live context: the thread's latest call's prompt, not the sum.
    assert usage["promptTokens"] == usage["lastPromptTokens"] == 70 < spent
    assert usage["contextWindow"] == 200000 and usage["estimated"] is False
    assert server_doc["files"][0] == {"path": "README.md", "name": "README.md", "action": "read"}
    (entry,) = server_doc["subAgents"]
    assert entry["role"] == "checker" and entry["status"] == "succeeded"
    # The child's own verdict, read from its final report; the REST API and the admin keep the same.
    assert entry["conclusion"] == "partial" and entry["summary"].startswith("main is fine")
    assert SubAgentTask.objects.get(id=entry["id"]).conclusion == "partial"
    assert server_doc["client"] == {"page": "editor"}


def test_the_child_is_asked_for_its_verdict(server, fake_api):
    fake_api.script([tool_turn("sub_agent", {"task": "CHILD: look"}, id="toolu_sub"), text_turn(["ok"])])
    fake_api.script_for("CHILD", [text_turn(["Looked. No verdict line here."])])
    run_client(
        "1",
        f"{server.url}/agui/coder",
        "test-token",
        [{"threadId": "t-ask-verdict", "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "go"}]}],
    )
    server.drain()
    child = next(r for r in fake_api.requests if "CHILD" in str(r.body["messages"][0]["content"]))
    system = child.body["system"]
    system_text = system if isinstance(system, str) else " ".join(block["text"] for block in system)
    assert "Conclusion: success" in system_text and "Conclusion: blocked" in system_text
    # It finished by itself without a verdict line: it succeeded.
    (entry,) = Thread.objects.get(agui_thread_id="t-ask-verdict").state["subAgents"]
    assert entry["conclusion"] == "success"


@pytest.mark.parametrize(
    ("report", "verdict"),
    [
        ("Done.\nConclusion: success", "success"),
        ("Half of it.\n\n**Conclusion:** partial — the tests are left", "partial"),
        ("conclusion = Failed.", "failed"),
        ("- Verdict: blocked (no credentials)", "blocked"),
        ("Conclusion: partial\nthen more work\nConclusion: success", "success"),
        ("The conclusion: success is near", None),
        ("No verdict at all.", None),
    ],
)
def test_a_verdict_is_read_from_its_own_line(report, verdict):
    assert parse_verdict(report) == verdict


def test_a_child_that_did_not_finish_by_itself_gets_the_verdict_its_ending_implies():
    assert conclusion_of("succeeded", "Conclusion: blocked") == "blocked"
    assert conclusion_of("stopped", "Conclusion: success") == "partial"
    assert conclusion_of("failed", "") == conclusion_of("cancelled", "") == conclusion_of("interrupted", "") == "failed"
    assert conclusion_of("running", "") == ""
