"""The per-thread shared-state document and the targeted JSON Patch operations that change it.

The document belongs to the thread, not the run. Its JSON
Pointer paths are part of the contract with clients. Each change produces
operations computed from what changed, never a diff of the whole document.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

from orchestrator.budget import BudgetStanding
from orchestrator.events import COMPACTION, Usage
from orchestrator.pricing import cost_of
from orchestrator.providers.base import ModelInfo

# Top-level keys the server owns. A client (CopilotKit sends back the last state
# it saw) may echo them; they are never copied into `client`.
SERVER_KEYS = (
    "thread",
    "session",
    "agent",
    "title",
    "model",
    "todos",
    "tokenUsage",
    "files",
    "subAgents",
    "grounding",
    "budget",
    "client",
)

Op = dict[str, Any]


def model_entry(info: ModelInfo) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": info.id,
        "name": info.name,
        "provider": info.provider,
        "contextWindow": info.context_window,
    }
    if info.offline_demo:
        entry["offlineDemo"] = True
    return entry


def empty_usage(context_window: int) -> dict[str, Any]:
    """The thread's token counts, under the seed's names (they are JSON Pointer paths of the contract).

    The seed's counts are "the live context budget": ``promptTokens`` beside ``contextWindow`` is how
    full the window is now, so they are the latest model call of the thread's own run (a sub-agent's
    calls fill a context of their own, not this one). What the thread has spent is kept under names
    of its own (``total*``), sub-agents' calls included, and ``cost`` is that spend in dollars."""
    return {
        "promptTokens": 0,  # the latest call's whole prompt: fresh input plus cache reads and writes
        "completionTokens": 0,  # that call's reply
        "cacheReadTokens": 0,  # the part of promptTokens read from the prompt cache
        "cacheWriteTokens": 0,  # the part of promptTokens written to it
        "reasoningTokens": 0,  # Anthropic counts thinking in the completion tokens and reports none apart
        "contextWindow": context_window,
        "estimated": False,  # the counts are the provider's own, not estimates
        "cost": 0.0,  # the thread's spend, US dollars at list prices (orchestrator/pricing.py)
        "lastPromptTokens": 0,  # promptTokens under the name it had while promptTokens was a total
        "totalPromptTokens": 0,
        "totalCompletionTokens": 0,
        "totalCacheReadTokens": 0,
        "totalCacheWriteTokens": 0,
        "totalTokens": 0,  # totalPromptTokens + totalCompletionTokens
    }


# Names the token counts had before they took the seed's; a document stored then is read with these.
_OLD_USAGE_NAMES = {
    "inputTokens": "promptTokens",
    "outputTokens": "completionTokens",
    "cachedInputTokens": "cacheReadTokens",
    "cacheWriteInputTokens": "cacheWriteTokens",
    "lastInputTokens": "lastPromptTokens",
}
# The seed's four counts were the thread's totals before they were the live context (issue #25).
_TOTALS = {
    "promptTokens": "totalPromptTokens",
    "completionTokens": "totalCompletionTokens",
    "cacheReadTokens": "totalCacheReadTokens",
    "cacheWriteTokens": "totalCacheWriteTokens",
}


def _usage_of(stored: Any, context_window: int) -> dict[str, Any]:
    usage = empty_usage(context_window)
    if isinstance(stored, dict):
        renamed = {_OLD_USAGE_NAMES.get(str(key), str(key)): value for key, value in stored.items()}
        if "totalPromptTokens" not in renamed:
            # Stored while the seed's names held totals: they move to theirs, and the live context
            # is the latest call's prompt, which was kept apart; the rest of that call is unknown.
            for name, total in _TOTALS.items():
                renamed[total] = renamed.pop(name, 0)
            renamed["promptTokens"] = renamed.get("lastPromptTokens", 0)
        usage.update(renamed)
    usage["contextWindow"] = context_window
    return usage


def budget_entry(standing: BudgetStanding) -> dict[str, Any]:
    """``/budget``: what the person may still spend (issue #48). ``leftUsd`` is what the tightest cap
    leaves (null: nothing is capped); each cap says whose it is, its limit, what is spent and when it
    resets (UTC, ISO 8601)."""
    caps = [
        {
            "name": cap.name,
            "limitUsd": round(cap.limit_usd, 6),
            "spentUsd": round(cap.spent_usd, 6),
            "leftUsd": round(cap.left_usd, 6),
            "resetsAt": cap.resets_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        for cap in standing.caps
    ]
    tightest = standing.tightest()
    return {
        "leftUsd": None if tightest is None else round(tightest.left_usd, 6),
        "exceeded": standing.reached() is not None,
        "caps": caps,
    }


def client_part(state: Any) -> dict[str, Any]:
    """What the client sent as ``state``, less what the server owns."""
    if not isinstance(state, dict):
        return {} if state is None else {"value": state}
    return {k: v for k, v in state.items() if k not in SERVER_KEYS}


class ThreadState:
    """The document of one thread and the operations that bring a client's copy up to date."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    @classmethod
    def for_run(
        cls,
        stored: dict[str, Any],
        *,
        thread_id: str,
        title: str,
        session_id: str,
        agent: str,
        model: ModelInfo,
        client_state: Any,
    ) -> ThreadState:
        doc = copy.deepcopy(stored) if stored else {}
        # The seed's paths: /thread, /session and /agent are plain strings.
        doc["thread"] = thread_id
        doc["session"] = session_id
        doc["agent"] = agent
        doc["title"] = title
        doc["model"] = model_entry(model)
        doc.setdefault("todos", [])
        doc["tokenUsage"] = _usage_of(doc.get("tokenUsage"), model.context_window)
        doc.setdefault("files", [])
        doc.setdefault("subAgents", [])
        doc.setdefault("grounding", {})
        doc.setdefault("budget", budget_entry(BudgetStanding()))
        doc["client"] = client_part(client_state)
        return cls({key: doc[key] for key in SERVER_KEYS})

    def usage_ops(self, usage: Usage) -> list[Op]:
        current = self.document["tokenUsage"]
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        updated = {
            "totalPromptTokens": current["totalPromptTokens"] + prompt,
            "totalCompletionTokens": current["totalCompletionTokens"] + usage.output_tokens,
            "totalCacheReadTokens": current["totalCacheReadTokens"] + usage.cache_read_tokens,
            "totalCacheWriteTokens": current["totalCacheWriteTokens"] + usage.cache_write_tokens,
            "cost": round(current.get("cost", 0.0) + cost_of(usage), 6),
        }
        updated["totalTokens"] = updated["totalPromptTokens"] + updated["totalCompletionTokens"]
        if not usage.task_id and usage.purpose != COMPACTION:
            # The thread's own context: a sub-agent's call, and a compaction's summary (whose prompt
            # is the turns it replaces), count in the totals only.
            updated |= {
                "promptTokens": prompt,
                "completionTokens": usage.output_tokens,
                "cacheReadTokens": usage.cache_read_tokens,
                "cacheWriteTokens": usage.cache_write_tokens,
                "lastPromptTokens": prompt,
            }
        ops: list[Op] = []
        for key, value in updated.items():
            if current.get(key) != value:
                current[key] = value
                ops.append({"op": "replace", "path": f"/tokenUsage/{key}", "value": value})
        return ops

    def budget_ops(self, standing: BudgetStanding) -> list[Op]:
        value = budget_entry(standing)
        if self.document.get("budget") == value:
            return []
        self.document["budget"] = value
        return [{"op": "replace", "path": "/budget", "value": value}]

    def todo_ops(self, todos: tuple[dict[str, str], ...]) -> list[Op]:
        """Operations from the old list to the new: per changed field while the items keep
        their ids and order (so one changed item of thousands is one operation), else a replace."""
        current: list[dict[str, Any]] = self.document["todos"]
        new = [dict(item) for item in todos]
        same_prefix = all(a.get("id") == b.get("id") for a, b in zip(current, new, strict=False))
        if not same_prefix:
            self.document["todos"] = new
            return [{"op": "replace", "path": "/todos", "value": new}]
        ops: list[Op] = []
        for index, (old, item) in enumerate(zip(current, new, strict=False)):
            for key, value in item.items():
                if old.get(key) != value:
                    ops.append(
                        {"op": "replace" if key in old else "add", "path": f"/todos/{index}/{key}", "value": value}
                    )
            ops.extend({"op": "remove", "path": f"/todos/{index}/{key}"} for key in old if key not in item)
        ops.extend({"op": "add", "path": "/todos/-", "value": item} for item in new[len(current) :])
        # Items past the new end go from the last backwards, so each index is still valid.
        ops.extend({"op": "remove", "path": f"/todos/{index}"} for index in range(len(current) - 1, len(new) - 1, -1))
        self.document["todos"] = new
        return ops

    def grounding_ops(self, report: dict[str, Any], gate_open: bool) -> list[Op]:
        value = {**report, "gateOpen": gate_open}
        self.document["grounding"] = value
        return [{"op": "replace", "path": "/grounding", "value": value}]

    def file_ops(self, touched: tuple[tuple[str, str], ...]) -> list[Op]:
        files: list[dict[str, Any]] = self.document["files"]
        ops: list[Op] = []
        for path, action in touched:
            entry = {"path": path, "name": path.rsplit("/", 1)[-1], "action": action}
            index = next((i for i, f in enumerate(files) if f["path"] == path), None)
            if index is None:
                files.append(entry)
                ops.append({"op": "add", "path": "/files/-", "value": entry})
            elif files[index]["action"] != action:
                files[index]["action"] = action
                ops.append({"op": "replace", "path": f"/files/{index}/action", "value": action})
        return ops

    def subagent_added_ops(self, entry: dict[str, Any]) -> list[Op]:
        """A new board entry at the end; past SUBAGENT_BOARD_SIZE entries, the oldest go first."""
        board: list[dict[str, Any]] = self.document["subAgents"]
        board.append(entry)
        ops: list[Op] = [{"op": "add", "path": "/subAgents/-", "value": entry}]
        while len(board) > SUBAGENT_BOARD_SIZE:
            board.pop(0)
            ops.append({"op": "remove", "path": "/subAgents/0"})
        return ops

    def subagent_changed_ops(self, task_id: str, changes: dict[str, Any]) -> list[Op]:
        board: list[dict[str, Any]] = self.document["subAgents"]
        index = next((i for i in range(len(board) - 1, -1, -1) if board[i].get("id") == task_id), None)
        if index is None:
            return []
        entry = board[index]
        ops: list[Op] = []
        for key, value in changes.items():
            if entry.get(key) != value:
                ops.append(
                    {"op": "replace" if key in entry else "add", "path": f"/subAgents/{index}/{key}", "value": value}
                )
                entry[key] = value
        return ops


# The sub-agent board keeps the thread's latest tasks; the database keeps them all.
SUBAGENT_BOARD_SIZE = 100


class StateCache:
    """The documents of recently active threads, newest last, bounded (LRU).

    The database copy is written when a run ends; this copy is current the
    moment the run's last event is out, so a next run that starts at once
    begins from the right document.
    """

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._docs: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def get(self, thread_id: str, default: dict[str, Any]) -> dict[str, Any]:
        doc = self._docs.get(thread_id)
        if doc is None:
            return default
        self._docs.move_to_end(thread_id)
        return doc

    def forget(self, thread_id: str) -> None:
        self._docs.pop(thread_id, None)

    def put(self, thread_id: str, document: dict[str, Any]) -> None:
        self._docs[thread_id] = document
        self._docs.move_to_end(thread_id)
        while len(self._docs) > self.capacity:
            self._docs.popitem(last=False)


STATE_CACHE = StateCache()
