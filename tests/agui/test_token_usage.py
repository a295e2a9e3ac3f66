"""tokenUsage in the shared state, as a client's copy of the document has it (@ag-ui/client 1.0.0 and
0.0.59): the counts are the live context budget (the latest model
call's whole prompt beside contextWindow), and what the thread spent is under total* names."""

from __future__ import annotations

import pytest
from django.test import override_settings

from agui.state import ThreadState
from orchestrator.providers.base import ModelInfo
from tests.agui_client import run_client
from tests.fakes.anthropic_api import text_turn, tool_turn
from threads.models import Thread

pytestmark = pytest.mark.clients
VERSIONS = ["1", "0"]


def _prompt_tokens_sent(result):
    """Every value /tokenUsage/promptTokens took in the run's deltas, in order."""
    return [
        op["value"]
        for event in result["received"]
        if event["type"] == "STATE_DELTA"
        for op in event["delta"]
        if op["path"] == "/tokenUsage/promptTokens"
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_prompt_tokens_is_the_latest_calls_whole_prompt_across_turns(server, fake_api, version):
    fake_api.script(
        [
            text_turn(["One."], input_tokens=1000, output_tokens=10),
            text_turn(["Two."], input_tokens=100, cache_read_input_tokens=1000, output_tokens=20),
            text_turn(
                ["Three."],
                input_tokens=50,
                cache_read_input_tokens=1000,
                cache_creation_input_tokens=150,
                output_tokens=30,
            ),
        ]
    )
    thread_id = f"t-usage-live-{version}"
    runs = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {"threadId": thread_id, "runId": "r1", "messages": [{"id": "u1", "role": "user", "content": "one"}]},
            {"runId": "r2", "append": [{"id": "u2", "role": "user", "content": "two"}]},
            {"runId": "r3", "append": [{"id": "u3", "role": "user", "content": "three"}]},
        ],
    )
    server.drain()
    assert [run["error"] for run in runs] == [None, None, None]
    usages = [run["state"]["tokenUsage"] for run in runs]
    # How full the window is after each turn: 1,000, then 1,100, then 1,200; never their sum.
    assert [usage["promptTokens"] for usage in usages] == [1000, 1100, 1200]
    last = usages[-1]
    assert (last["completionTokens"], last["cacheReadTokens"], last["cacheWriteTokens"]) == (30, 1000, 150)
    assert last["lastPromptTokens"] == 1200 and last["contextWindow"] == 200_000
    # What the thread spent, under names of its own.
    assert (
        last["totalPromptTokens"],
        last["totalCompletionTokens"],
        last["totalCacheReadTokens"],
        last["totalCacheWriteTokens"],
        last["totalTokens"],
    ) == (3300, 60, 2000, 150, 3360)
    assert last["cost"] > 0
    assert Thread.objects.get(agui_thread_id=thread_id).state["tokenUsage"] == last


@pytest.mark.parametrize("version", VERSIONS)
def test_after_a_compaction_prompt_tokens_is_the_compacted_prompt(server, fake_api, version):
    fake_api.script(
        [
            tool_turn("glob", {"pattern": "*"}, input_tokens=100, output_tokens=5),
            tool_turn("file_read", {"path": "README.md"}, input_tokens=900, output_tokens=5),
            text_turn(["The user listed the workspace and read the README."], input_tokens=800),  # the summary
            text_turn(["It is a demo project."], input_tokens=300, output_tokens=7),
        ]
    )
    thread_id = f"t-usage-compacted-{version}"
    with override_settings(COMPACTION_WINDOW_TOKENS=1000, COMPACTION_AT_SHARE=0.75):
        (run,) = run_client(
            version,
            f"{server.url}/agui/coder",
            "test-token",
            [
                {
                    "threadId": thread_id,
                    "runId": "r1",
                    "messages": [{"id": "u1", "role": "user", "content": "what is this?"}],
                }
            ],
        )
    server.drain()
    assert run["error"] is None
    assert "compacting" in [e.get("stepName") for e in run["received"]]
    # The gauge follows the window: it fills, and after the summary it shows the smaller prompt.
    assert _prompt_tokens_sent(run) == [100, 900, 300]
    usage = run["state"]["tokenUsage"]
    assert (usage["promptTokens"], usage["completionTokens"]) == (300, 7)
    assert usage["totalPromptTokens"] == 100 + 900 + 800 + 300  # the summary's call is spent too (issue #42)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sub_agents_calls_count_in_the_totals_not_in_the_threads_context(server, fake_api, version):
    fake_api.script(
        [
            tool_turn("sub_agent", {"task": "read the README", "role": "reader"}, input_tokens=1000, output_tokens=5),
            text_turn(["It is a demo project."], input_tokens=7000, output_tokens=9),  # the sub-agent's call
            text_turn(["The reader says it is a demo."], input_tokens=1200, output_tokens=11),
        ]
    )
    (run,) = run_client(
        version,
        f"{server.url}/agui/coder",
        "test-token",
        [
            {
                "threadId": f"t-usage-child-{version}",
                "runId": "r1",
                "messages": [{"id": "u1", "role": "user", "content": "delegate it"}],
            }
        ],
    )
    server.drain()
    assert run["error"] is None
    assert _prompt_tokens_sent(run) == [1000, 1200]
    usage = run["state"]["tokenUsage"]
    assert usage["promptTokens"] == 1200
    assert usage["totalPromptTokens"] == 1000 + 7000 + 1200 and usage["totalCompletionTokens"] == 5 + 9 + 11


def test_a_document_stored_with_summed_counts_is_read_with_the_live_context():
    """A thread whose document an older process wrote (after the migration ran) reads the same way."""
    summed = {"promptTokens": 2100, "completionTokens": 30, "cacheReadTokens": 1000, "lastPromptTokens": 1100}
    state = ThreadState.for_run(
        {"tokenUsage": summed},
        thread_id="t",
        title="",
        session_id="s",
        agent="coder",
        model=ModelInfo(id="m", name="m", provider="test", context_window=1000),
        client_state=None,
    )
    usage = state.document["tokenUsage"]
    assert (usage["promptTokens"], usage["completionTokens"], usage["cacheReadTokens"]) == (1100, 0, 0)
    assert (usage["totalPromptTokens"], usage["totalCompletionTokens"], usage["totalCacheReadTokens"]) == (
        2100,
        30,
        1000,
    )
    assert usage["contextWindow"] == 1000
