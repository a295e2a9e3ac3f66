"""bash's network in the tests (issue #47): the loopback address the sandbox's proxy is the way to,
the settings that let bash reach it once granted, and a chat whose approvals are answered in turn."""

from __future__ import annotations

from typing import Any

from django.test import override_settings

from tests.agui_client import run_client
from tests.sse import EVENT

# A loopback address of the host, not in the sandbox's no_proxy: reached only through the proxy, and
# only because the operator lets it past the address checks (AGENT_BASH_ALLOWED_PRIVATE_HOSTS).
HOST = "127.0.0.2"
YES = {"status": "resolved", "payload": {"approved": True}}
YES_ALWAYS = {"status": "resolved", "payload": {"approved": True, "always": True}}


def allowlist() -> override_settings:
    """bash in bwrap with AGENT_BASH_NETWORK=allowlist and no host listed: HOST is refused until granted."""
    return override_settings(
        AGENT_BASH_SANDBOX="on", AGENT_BASH_NETWORK="allowlist", AGENT_BASH_ALLOWED_PRIVATE_HOSTS=frozenset({HOST})
    )


def answered_chat(server: Any, version: str, thread_id: str, *answers: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat on ``thread_id`` through @ag-ui/client ``version`` whose interrupts get ``answers`` in turn."""
    first = {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "fetch"}]}
    steps = [first, *({"runId": f"r{n}", "answerAll": answer} for n, answer in enumerate(answers, 2))]
    results = run_client(version, f"{server.url}/agui/coder", "test-token", steps)
    server.drain()
    for result in results:
        assert result["error"] is None, result["error"]
        for event in result["received"]:
            EVENT.validate_python(event)
    return results


def tool_results(results: list[dict[str, Any]]) -> dict[str, str]:
    """What each tool call returned, by the model's id of the call."""
    return {
        event["toolCallId"]: event["content"]
        for result in results
        for event in result["received"]
        if event["type"] == "TOOL_CALL_RESULT"
    }
