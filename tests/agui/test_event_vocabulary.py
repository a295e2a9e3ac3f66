"""The AG-UI event vocabulary the server emits, pinned for both protocol versions.

Representative runs (a chat with reasoning and tool calls, a hydrate, an approval and a question
asked and answered, an MCP server's question, a browser tool, a delegation to sub-agents, a provider error, a cancel, a
message that joins a run in flight, a pause) go through the real
@ag-ui/client 1.0.0 and 0.0.59. Every frame the server sent is reduced to its type and its
sorted keys (with the outcome's, the interrupts' and the custom events' names apart), and the
set of those shapes must be exactly the table below: a new event type or key, or one that goes
away, fails here, so widening the vocabulary is a deliberate edit of this table.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agui_client import run_client
from tests.fakes.anthropic_api import http_error, text, text_turn, thinking, tool_turn, tool_use, turn
from tests.helpers import eventually
from tests.mcp_world import elicit_stdio, mcp_servers
from tests.sse import EVENT
from threads.models import QueuedMessage

pytestmark = pytest.mark.clients

Shape = tuple[str, tuple[str, ...]]

BROWSER_TOOL = {
    "name": "change_background",
    "description": "Change the page's background colour.",
    "parameters": {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]},
}


def _shapes(event: dict[str, Any]) -> set[Shape]:
    """The event's type and sorted keys; a custom event's value, an outcome and its interrupts
    are described apart, since their keys are part of the contract too."""
    kind = event["type"]
    if kind == "CUSTOM":
        kind = f"CUSTOM {event['name']}"
    shapes = {(kind, tuple(sorted(event)))}
    if kind.startswith("CUSTOM") and isinstance(event.get("value"), dict):
        shapes.add((f"{kind} value", tuple(sorted(event["value"]))))
    outcome = event.get("outcome")
    if isinstance(outcome, dict):
        shapes.add((f"{kind} outcome {outcome['type']}", tuple(sorted(outcome))))
        for interrupt in outcome.get("interrupts", []):
            shapes.add((f"{kind} interrupt {interrupt['reason']}", tuple(sorted(interrupt))))
    return shapes


def _runs(server: Any, fake_api: Any, coder: Any, version: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The representative runs, through the client of ``version``; each result as run.mjs reports it."""
    coder.thinking_budget = 1024
    coder.save()
    url = f"{server.url}/agui/coder"
    results: list[dict[str, Any]] = []

    # A chat: reasoning, text and a workspace tool call, then the answer; a second page hydrates it.
    fake_api.script(
        [
            turn(
                thinking(["Looking ", "around."]),
                text(["Reading ", "the readme."]),
                tool_use("file_read", {"path": "README.md"}),
            ),
            text_turn(["It is a demo project."]),
        ]
    )
    thread = f"t-vocabulary-chat-{version}"
    results += run_client(
        version, url, server.token, [{"threadId": thread, "runId": "r1", "messages": [_user("what is this?")]}]
    )
    results += run_client(version, url, server.token, [{"threadId": thread, "runId": "r-hydrate", "messages": []}])

    # An approval: the run ends on an interrupt, and the answer goes on with it.
    fake_api.script([tool_turn("file_write", {"path": "notes.txt", "content": "milk\n"}), text_turn(["Done."])])
    results += run_client(
        version,
        url,
        server.token,
        [
            {"threadId": f"t-vocabulary-approval-{version}", "runId": "r1", "messages": [_user("note it")]},
            {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}},
        ],
    )

    # A question: the run ends on an input_required interrupt, and the reply goes on with it.
    fake_api.script([tool_turn("ask_user", {"question": "Which file?"}), text_turn(["Thanks."])])
    results += run_client(
        version,
        url,
        server.token,
        [
            {"threadId": f"t-vocabulary-question-{version}", "runId": "r1", "messages": [_user("ask me")]},
            {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"answer": "README.md"}}},
        ],
    )

    # An MCP server's question mid-call (issue #46): an mcp:elicitation interrupt, after the call's approval.
    fake_api.script([tool_turn("mcp__shop__book", {}), text_turn(["Booked."])])
    with mcp_servers(server, tmp_path, {"shop": elicit_stdio()}):
        results += run_client(
            version,
            url,
            server.token,
            [
                {"threadId": f"t-vocabulary-elicit-{version}", "runId": "r1", "messages": [_user("book")]},
                {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"approved": True}}},
                {"runId": "r1", "answerAll": {"status": "resolved", "payload": {"seats": 1}}},
            ],
        )

    # A browser tool: the run ends waiting for the client's result, which the next request brings.
    fake_api.script([tool_turn("change_background", {"color": "blue"}, id="toolu_bg"), text_turn(["Blue now."])])
    results += run_client(
        version,
        url,
        server.token,
        [
            {
                "threadId": f"t-vocabulary-browser-{version}",
                "runId": "r1",
                "tools": [BROWSER_TOOL],
                "messages": [_user("make it blue")],
            },
            {
                "runId": "r2",
                "tools": [BROWSER_TOOL],
                "append": [{"id": "tr1", "role": "tool", "toolCallId": "toolu_bg", "content": "set to blue"}],
            },
        ],
    )

    # A delegation: one child works, one fails.
    fake_api.script(
        [
            turn(
                tool_use("sub_agent", {"task": "VOCAB-A: read the app", "role": "reader"}),
                tool_use("sub_agent", {"task": "VOCAB-B: fail", "role": "failer"}),
            ),
            text_turn(["One worked, one failed."]),
        ]
    )
    fake_api.script_for("VOCAB-A", [tool_turn("file_read", {"path": "src/app.py"}), text_turn(["It says hello."])])
    fake_api.script_for("VOCAB-B", [http_error(400, "invalid_request_error", "no such model")])
    results += run_client(
        version,
        url,
        server.token,
        [{"threadId": f"t-vocabulary-delegate-{version}", "runId": "r1", "messages": [_user("delegate")]}],
    )

    # A provider error mid-stream: the run ends with RUN_ERROR.
    fake_api.script([text_turn(["Partial ", "reply ", "cut"]).error_mid_stream(after_events=5)])
    results += run_client(
        version,
        url,
        server.token,
        [{"threadId": f"t-vocabulary-error-{version}", "runId": "r1", "messages": [_user("hi")]}],
    )

    # A cancel while the reply streams: the run stops at its next safe point.
    slow = text_turn(["a ", "long ", "answer ", "cut ", "short"]).pause(after_events=5)
    fake_api.script([slow])
    thread = f"t-vocabulary-cancel-{version}"
    with ThreadPoolExecutor(1) as pool:
        client = pool.submit(
            run_client, version, url, server.token, [{"threadId": thread, "runId": "r1", "messages": [_user("go")]}]
        )
        assert slow.paused.wait(10)
        cancel = httpx.post(
            f"{url}/threads/{thread}/runs/r1/cancel", headers={"Authorization": f"Bearer {server.token}"}
        )
        assert cancel.status_code == 202
        slow.resume.set()
        results += client.result(30)

    # A message sent while a run is in flight: it is queued, the run reads it at its next tool
    # boundary, and the request that sent it follows the run from there.
    reading = tool_turn("file_read", {"path": "README.md"}).pause(after_events=2)
    fake_api.script([reading, text_turn(["Read it, and noted the second ask."])])
    thread = f"t-vocabulary-join-{version}"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(
            run_client, version, url, server.token, [{"threadId": thread, "runId": "r1", "messages": [_user("read")]}]
        )
        assert reading.paused.wait(10)
        second = pool.submit(
            run_client,
            version,
            url,
            server.token,
            [{"threadId": thread, "runId": "r2", "messages": [_user("read"), _user("be brief")]}],
        )
        eventually(
            lambda: QueuedMessage.objects.filter(thread__agui_thread_id=thread).exists(), what="the message queued"
        )
        reading.resume.set()
        results += first.result(30) + second.result(30)

    # A run past its iteration cap pauses.
    coder.max_iterations = 1
    coder.save()
    fake_api.script([tool_turn("glob", {"pattern": "*.md"})])
    results += run_client(
        version,
        url,
        server.token,
        [{"threadId": f"t-vocabulary-pause-{version}", "runId": "r1", "messages": [_user("work")]}],
    )
    server.drain()
    return results


def _user(content: str) -> dict[str, Any]:
    return {"id": f"u-{content}", "role": "user", "content": content}


def _vocabulary(results: list[dict[str, Any]]) -> set[Shape]:
    shapes: set[Shape] = set()
    for result in results:
        assert result["error"] is None, result["error"]
        assert not result.get("warnings"), result["warnings"]
        for event in result["received"]:
            EVENT.validate_python(event)
            shapes |= _shapes(event)
    return shapes


@pytest.mark.parametrize("version", ["1", "0"])
def test_the_server_emits_exactly_the_pinned_vocabulary(server, fake_api, coder, workspace, version, tmp_path):
    emitted = _vocabulary(_runs(server, fake_api, coder, version, tmp_path))
    expected = VOCABULARY[version]
    assert emitted == expected, f"new: {sorted(emitted - expected)}\ngone: {sorted(expected - emitted)}"


# Every shape the server sends, in three parts so that the difference between the versions reads
# as one: what both versions' clients get, what only 1.0 clients get (protocolVersion, outcomes on
# success and cancel, pendingToolCallIds, SUBAGENT_* events and subagentRunId), and what only 0.x
# clients get (a RUN_FINISHED with no outcome, a cancel's custom event).
BOTH_VERSIONS: set[Shape] = {
    ("RUN_FINISHED", ("outcome", "runId", "threadId", "type")),
    (
        "RUN_FINISHED interrupt confirmation",
        ("expiresAt", "id", "message", "metadata", "reason", "responseSchema", "toolCallId"),
    ),
    ("RUN_FINISHED interrupt input_required", ("expiresAt", "id", "message", "reason", "responseSchema", "toolCallId")),
    (
        "RUN_FINISHED interrupt mcp:elicitation",
        ("expiresAt", "id", "message", "metadata", "reason", "responseSchema", "toolCallId"),
    ),
    ("RUN_FINISHED outcome interrupt", ("interrupts", "type")),
    ("RUN_ERROR", ("code", "message", "type")),
    ("CUSTOM threadline.message_queued", ("name", "type", "value")),
    ("CUSTOM threadline.message_queued value", ("display", "requestId")),
    ("CUSTOM threadline.paused", ("name", "type", "value")),
    ("CUSTOM threadline.paused value", ("reason",)),
    ("CUSTOM threadline.queued_messages_read", ("name", "type", "value")),
    ("CUSTOM threadline.queued_messages_read value", ("requestIds",)),
    ("MESSAGES_SNAPSHOT", ("messages", "type")),
    ("STATE_SNAPSHOT", ("snapshot", "type")),
    ("STATE_DELTA", ("delta", "type")),
    ("STEP_STARTED", ("stepName", "type")),
    ("STEP_FINISHED", ("stepName", "type")),
    ("REASONING_START", ("messageId", "type")),
    ("REASONING_MESSAGE_START", ("messageId", "role", "type")),
    ("REASONING_MESSAGE_CONTENT", ("delta", "messageId", "type")),
    ("REASONING_MESSAGE_END", ("messageId", "type")),
    ("REASONING_END", ("messageId", "type")),
    ("TEXT_MESSAGE_START", ("messageId", "role", "type")),
    ("TEXT_MESSAGE_CONTENT", ("delta", "messageId", "type")),
    ("TEXT_MESSAGE_END", ("messageId", "type")),
    ("TOOL_CALL_START", ("parentMessageId", "toolCallId", "toolCallName", "type")),
    ("TOOL_CALL_ARGS", ("delta", "toolCallId", "type")),
    ("TOOL_CALL_END", ("toolCallId", "type")),
    ("TOOL_CALL_RESULT", ("content", "messageId", "role", "toolCallId", "type")),
}
ONLY_1_0: set[Shape] = {
    ("RUN_STARTED", ("protocolVersion", "runId", "threadId", "type")),
    ("RUN_FINISHED outcome cancelled", ("type",)),
    ("RUN_FINISHED outcome success", ("pendingToolCallIds", "type")),
    ("RUN_FINISHED outcome success", ("type",)),
    ("STEP_STARTED", ("stepName", "subagentRunId", "type")),
    ("STEP_FINISHED", ("stepName", "subagentRunId", "type")),
    ("TEXT_MESSAGE_START", ("messageId", "role", "subagentRunId", "type")),
    ("TEXT_MESSAGE_CONTENT", ("delta", "messageId", "subagentRunId", "type")),
    ("TEXT_MESSAGE_END", ("messageId", "subagentRunId", "type")),
    ("TOOL_CALL_START", ("parentMessageId", "subagentRunId", "toolCallId", "toolCallName", "type")),
    ("TOOL_CALL_ARGS", ("delta", "subagentRunId", "toolCallId", "type")),
    ("TOOL_CALL_END", ("subagentRunId", "toolCallId", "type")),
    ("TOOL_CALL_RESULT", ("content", "messageId", "role", "subagentRunId", "toolCallId", "type")),
    ("SUBAGENT_STARTED", ("description", "name", "parentToolCallId", "subagentRunId", "type")),
    ("SUBAGENT_FINISHED", ("outcome", "result", "subagentRunId", "type")),
    ("SUBAGENT_FINISHED outcome success", ("type",)),
    ("SUBAGENT_ERROR", ("code", "message", "subagentRunId", "type")),
}
ONLY_0_X: set[Shape] = {
    ("RUN_STARTED", ("runId", "threadId", "type")),
    ("RUN_FINISHED", ("runId", "threadId", "type")),
    ("CUSTOM threadline.cancelled", ("name", "type", "value")),
    ("CUSTOM threadline.cancelled value", ("reason",)),
}
VOCABULARY: dict[str, set[Shape]] = {"1": BOTH_VERSIONS | ONLY_1_0, "0": BOTH_VERSIONS | ONLY_0_X}
