"""Stored state documents take the seed's paths: /thread, /session and /agent become strings (the
title moves to /title), the token counts take the seed's names, and a sub-agent's conclusion becomes
its verdict (success, partial, failed, blocked), on the board and on its task row.

It lives in the adapter's app (the document is the adapter's contract) and needs only the threads
tables as they are at 0011; the rows are rewritten in batches.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import migrations

OLD_USAGE_NAMES = {
    "inputTokens": "promptTokens",
    "outputTokens": "completionTokens",
    "cachedInputTokens": "cacheReadTokens",
    "cacheWriteInputTokens": "cacheWriteTokens",
    "lastInputTokens": "lastPromptTokens",
}
VERDICT_LINE = re.compile(
    r"^[\s>*_#`-]*(?:conclusion|verdict)[\s*_`]*[:=-]+[\s*_`]*(success|partial|failed|blocked)\b",
    re.IGNORECASE | re.MULTILINE,
)


def verdict(status: str, summary: str) -> str:
    if status == "succeeded":
        found = VERDICT_LINE.findall(summary or "")
        return found[-1].lower() if found else "success"
    if status == "stopped":
        return "partial"
    if status in ("failed", "cancelled", "interrupted"):
        return "failed"
    return ""


def upgrade(doc: dict[str, Any]) -> dict[str, Any]:
    for key, field in (("thread", "id"), ("session", "id"), ("agent", "name")):
        value = doc.get(key)
        if isinstance(value, dict):
            if key == "thread":
                doc["title"] = value.get("title", "")
            doc[key] = str(value.get(field, ""))
    usage = doc.get("tokenUsage")
    if isinstance(usage, dict):
        doc["tokenUsage"] = {OLD_USAGE_NAMES.get(k, k): v for k, v in usage.items()}
    for entry in doc.get("subAgents") or []:
        if isinstance(entry, dict) and entry.get("conclusion") and entry["conclusion"] not in (
            "success",
            "partial",
            "failed",
            "blocked",
        ):
            entry["conclusion"] = verdict(str(entry.get("status", "")), str(entry.get("summary", "")))
    return doc


def forwards(apps: Any, schema_editor: Any) -> None:
    Thread = apps.get_model("threads", "Thread")
    SubAgentTask = apps.get_model("threads", "SubAgentTask")
    batch = []
    for thread in Thread.objects.exclude(state={}).only("id", "state").iterator(chunk_size=500):
        if isinstance(thread.state, dict):
            thread.state = upgrade(thread.state)
            batch.append(thread)
        if len(batch) >= 500:
            Thread.objects.bulk_update(batch, ["state"])
            batch = []
    if batch:
        Thread.objects.bulk_update(batch, ["state"])
    tasks = []
    for task in SubAgentTask.objects.exclude(conclusion__in=["", "success", "partial", "failed", "blocked"]).only(
        "id", "status", "summary", "conclusion"
    ).iterator(chunk_size=500):
        task.conclusion = verdict(task.status, task.summary)
        tasks.append(task)
        if len(tasks) >= 500:
            SubAgentTask.objects.bulk_update(tasks, ["conclusion"])
            tasks = []
    if tasks:
        SubAgentTask.objects.bulk_update(tasks, ["conclusion"])


class Migration(migrations.Migration):
    dependencies = [("threads", "0011_durable_waiting_runs")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
