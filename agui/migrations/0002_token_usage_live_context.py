"""Stored state documents take the seed's meaning of ``tokenUsage`` (issue #25): ``promptTokens`` is
the live context (the latest model call's whole prompt), not the sum over calls. The sums move to
names of their own (``totalPromptTokens``, ``totalCompletionTokens``, ``totalCacheReadTokens``,
``totalCacheWriteTokens``); ``promptTokens`` takes ``lastPromptTokens``, which held the latest
prompt all along. The latest call's completion and cache counts were never kept apart: they are 0
until the thread's next model call. agui/state.py reads a document not yet rewritten the same way.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

TOTALS = {
    "promptTokens": "totalPromptTokens",
    "completionTokens": "totalCompletionTokens",
    "cacheReadTokens": "totalCacheReadTokens",
    "cacheWriteTokens": "totalCacheWriteTokens",
}


def upgrade(usage: dict[str, Any]) -> dict[str, Any]:
    if "totalPromptTokens" in usage:
        return usage
    upgraded = dict(usage)
    for name, total in TOTALS.items():
        upgraded[total] = upgraded.pop(name, 0)
    upgraded["promptTokens"] = upgraded.get("lastPromptTokens", 0)
    for name in ("completionTokens", "cacheReadTokens", "cacheWriteTokens"):
        upgraded[name] = 0
    return upgraded


def forwards(apps: Any, schema_editor: Any) -> None:
    Thread = apps.get_model("threads", "Thread")
    batch = []
    for thread in Thread.objects.exclude(state={}).only("id", "state").iterator(chunk_size=500):
        usage = thread.state.get("tokenUsage") if isinstance(thread.state, dict) else None
        if isinstance(usage, dict) and "totalPromptTokens" not in usage:
            thread.state["tokenUsage"] = upgrade(usage)
            batch.append(thread)
        if len(batch) >= 500:
            Thread.objects.bulk_update(batch, ["state"])
            batch = []
    if batch:
        Thread.objects.bulk_update(batch, ["state"])


class Migration(migrations.Migration):
    dependencies = [("agui", "0001_state_document_seed_paths")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
