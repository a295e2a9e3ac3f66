"""Data migrations, run on rows as earlier versions left them."""

from __future__ import annotations

import importlib

from django.apps import apps

from agents.models import Agent
from threads.models import Run, Thread


def test_answered_runs_left_waiting_by_earlier_versions_are_finished(db):
    migration = importlib.import_module("threads.migrations.0010_answered_waiting_runs_finished")
    thread = Thread.objects.create(agui_thread_id="t-old", agent=Agent.objects.get(name="coder"))
    answered = Run.objects.create(thread=thread, agui_run_id="r1", status=Run.Status.WAITING, outcome="interrupt")
    Run.objects.create(thread=thread, agui_run_id="r1-continued", parent=answered, status=Run.Status.SUCCEEDED)
    still_waiting = Run.objects.create(thread=thread, agui_run_id="r2", status=Run.Status.WAITING)
    migration.finish_answered(apps, None)
    answered.refresh_from_db()
    still_waiting.refresh_from_db()
    assert (answered.status, answered.outcome) == (Run.Status.SUCCEEDED, "interrupt")
    assert still_waiting.status == Run.Status.WAITING


def test_the_seeded_agent_takes_the_seeds_defaults_unless_someone_changed_them(db):
    migration = importlib.import_module("agents.migrations.0005_agent_environment_block_and_seed_defaults")
    coder = Agent.objects.get(name="coder")
    assert (coder.max_iterations, coder.max_tokens) == (20, 4096)  # as a fresh install has it
    Agent.objects.filter(name="coder").update(max_iterations=50, max_tokens=8192)
    Agent.objects.create(name="tuned", max_iterations=50, max_tokens=8192)
    migration.seeded_agent_to_seed_defaults(apps, None)
    assert Agent.objects.get(name="coder").max_iterations == 20
    assert Agent.objects.get(name="tuned").max_iterations == 50  # not the seeded agent: left alone
    Agent.objects.filter(name="coder").update(max_iterations=35, max_tokens=8192)
    migration.seeded_agent_to_seed_defaults(apps, None)
    assert Agent.objects.get(name="coder").max_iterations == 35  # an operator's choice is kept


def test_stored_state_documents_take_the_seeds_paths_and_conclusions_become_verdicts(db):
    from threads.models import SubAgentTask

    migration = importlib.import_module("agui.migrations.0001_state_document_seed_paths")
    old_state = {
        "thread": {"id": "t-doc", "title": "about it"},
        "session": {"id": "s-1"},
        "agent": {"name": "coder"},
        "tokenUsage": {
            "inputTokens": 30,
            "outputTokens": 4,
            "cachedInputTokens": 20,
            "cacheWriteInputTokens": 5,
            "lastInputTokens": 30,
            "totalTokens": 34,
            "cost": 0.5,
        },
        "subAgents": [
            {
                "id": "sa-1",
                "status": "succeeded",
                "summary": "Done.\nConclusion: partial",
                "conclusion": "completed (2 model call(s))",
            },
            {"id": "sa-2", "status": "stopped", "summary": "", "conclusion": "stopped at its cap"},
        ],
    }
    thread = Thread.objects.create(agui_thread_id="t-doc", agent=Agent.objects.get(name="coder"), state=old_state)
    run = Run.objects.create(thread=thread, agui_run_id="r1")
    task = SubAgentTask.objects.create(
        id="sa-1",
        thread=thread,
        run=run,
        status="succeeded",
        summary="**Conclusion:** blocked — no key",
        conclusion="completed (1 model call(s))",
    )
    migration.forwards(apps, None)
    thread.refresh_from_db()
    task.refresh_from_db()
    doc = thread.state
    assert (doc["thread"], doc["session"], doc["agent"], doc["title"]) == ("t-doc", "s-1", "coder", "about it")
    assert doc["tokenUsage"] == {
        "promptTokens": 30,
        "completionTokens": 4,
        "cacheReadTokens": 20,
        "cacheWriteTokens": 5,
        "lastPromptTokens": 30,
        "totalTokens": 34,
        "cost": 0.5,
    }
    assert [e["conclusion"] for e in doc["subAgents"]] == ["partial", "partial"]
    assert task.conclusion == "blocked"


def test_stored_token_usage_takes_the_live_context_and_keeps_the_sums_under_their_own_names(db):
    migration = importlib.import_module("agui.migrations.0002_token_usage_live_context")
    summed = {
        "promptTokens": 2100,  # two calls of 1,000 and 1,100
        "completionTokens": 30,
        "cacheReadTokens": 1000,
        "cacheWriteTokens": 0,
        "reasoningTokens": 0,
        "lastPromptTokens": 1100,
        "totalTokens": 2130,
        "contextWindow": 200000,
        "estimated": False,
        "cost": 0.5,
    }
    coder = Agent.objects.get(name="coder")
    thread = Thread.objects.create(agui_thread_id="t-summed", agent=coder, state={"tokenUsage": summed})
    current = {**summed, "promptTokens": 1100, "totalPromptTokens": 2100}
    untouched = Thread.objects.create(agui_thread_id="t-current", agent=coder, state={"tokenUsage": current})
    migration.forwards(apps, None)
    thread.refresh_from_db()
    untouched.refresh_from_db()
    assert thread.state["tokenUsage"] == {
        "promptTokens": 1100,
        "completionTokens": 0,
        "cacheReadTokens": 0,
        "cacheWriteTokens": 0,
        "reasoningTokens": 0,
        "lastPromptTokens": 1100,
        "totalPromptTokens": 2100,
        "totalCompletionTokens": 30,
        "totalCacheReadTokens": 1000,
        "totalCacheWriteTokens": 0,
        "totalTokens": 2130,
        "contextWindow": 200000,
        "estimated": False,
        "cost": 0.5,
    }
    assert untouched.state["tokenUsage"] == current


def test_the_seeded_agent_takes_the_seeds_grounding_mode_unless_someone_chose_another(db):
    migration = importlib.import_module("agents.migrations.0006_grounding_prompt_by_default")
    Agent.objects.filter(name="coder").update(grounding_mode="off")
    Agent.objects.create(name="quiet", grounding_mode="off")
    migration.seeded_agent_to_prompt(apps, None)
    assert Agent.objects.get(name="coder").grounding_mode == "prompt"
    assert Agent.objects.get(name="quiet").grounding_mode == "off"  # not the seeded agent: left alone
    Agent.objects.filter(name="coder").update(grounding_mode="enforced")
    migration.seeded_agent_to_prompt(apps, None)
    assert Agent.objects.get(name="coder").grounding_mode == "enforced"  # an operator's choice is kept


def test_uploads_stored_messages_name_already_are_tied_to_their_thread(db):
    from threads.models import Attachment, Message

    migration = importlib.import_module("threads.migrations.0024_attachment_thread")
    thread = Thread.objects.create(agui_thread_id="t-up", agent=Agent.objects.get(name="coder"))
    named, unnamed = (Attachment.objects.create(media_type="image/png", size=1, data=b"x") for _ in range(2))
    part = {"type": "image", "source": {"type": "url", "value": f"http://h/copilotkit/attachments/{named.pk.hex}"}}
    Message.objects.create(
        thread=thread, position=0, message_id="u1", role="user", body={"id": "u1", "role": "user", "content": [part]}
    )
    migration.claim_named_uploads(apps, None)
    named.refresh_from_db()
    unnamed.refresh_from_db()
    assert named.thread == thread and unnamed.thread is None
