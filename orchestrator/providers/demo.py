"""The offline demo model, used when no ANTHROPIC_API_KEY is set.

It is not a language model: it follows a fixed script (think, look at the
workspace with real tools, read a file, answer) so that a newcomer sees every
part of a run stream without a key. Its tool calls are reported only in the
final reply, never streamed, like providers that do not stream tool use, so the
server's reconstruction of the stream is exercised by the demo too.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from orchestrator.providers.base import (
    BlockDelta,
    BlockStart,
    BlockStop,
    ModelInfo,
    ModelReply,
    ModelRequest,
    StreamEvent,
    TokenCount,
)

DEMO_PLAN = [
    {"id": "1", "content": "Read the README", "status": "completed"},
    {"id": "2", "content": "Look at the code the question is about", "status": "in_progress"},
    {"id": "3", "content": "Answer with file and line references", "status": "pending"},
]
DEMO_SUBTASK = "Survey the workspace: list what is at its top level and read its README."
DEMO_NOTE = "(This answer comes from Threadline's offline demo model; set ANTHROPIC_API_KEY to talk to Claude.)"


def _words(text: str) -> list[str]:
    return re.findall(r"\S+\s*|\s+", text)


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            return content
        texts = [str(b.get("text", "")) for b in content if b.get("type") == "text"]
        if texts:
            return texts[-1]
    return ""


def _tool_results(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = messages[-1] if messages else None
    if not last or last["role"] != "user" or isinstance(last["content"], str):
        return []
    return [b for b in last["content"] if b.get("type") == "tool_result"]


class DemoProvider:
    def __init__(self, *, delay: float = 0.02) -> None:
        self.delay = delay
        self.info = ModelInfo(
            id="threadline-demo",
            name="Threadline offline demo model",
            provider="threadline-demo",
            context_window=200_000,
            offline_demo=True,
        )

    def _next_turn(self, request: ModelRequest) -> tuple[str, str, list[dict[str, Any]]]:
        """(thinking, text, tool calls) for the next reply, from where the conversation is."""
        results = _tool_results(request.messages)
        question = _last_user_text(request.messages).strip()
        question = question.split("</context>")[-1].strip()
        tool_names = {t["name"] for t in request.tools}
        if not results and "todo_write" in tool_names and re.search(r"\b(plan|todos?)\b", question, re.I):
            # Asked for a plan, the demo writes a todo list: a call that changes something,
            # so a newcomer sees an approval (and then the list in the shared state).
            return (
                "A plan is a todo list; writing it needs the user's approval.",
                "Here is a plan; I will put it on the todo list.",
                [{"name": "todo_write", "input": {"todos": DEMO_PLAN}}],
            )
        if not results and "sub_agent" in tool_names and re.search(r"\b(delegate|sub-?agents?)\b", question, re.I):
            # Asked to delegate, the demo hands a survey of the workspace to a sub-agent, so a
            # newcomer sees a child run on the board (and, in a 1.0 client, its own stream).
            return (
                "Surveying the workspace is a self-contained task; a sub-agent can do it.",
                "I will ask a sub-agent to survey the workspace.",
                [{"name": "sub_agent", "input": {"task": DEMO_SUBTASK, "role": "surveyor"}}],
            )
        previous = self._previous_tool(request.messages)
        if previous == "sub_agent":
            outcome = str(results[0].get("content", "")) if results else ""
            return "", f"The sub-agent reported:\n\n{outcome}\n\n{DEMO_NOTE}", []
        if previous == "todo_write":
            outcome = str(results[0].get("content", "")) if results else ""
            return "", f"The todo list says:\n\n{outcome}\n\n{DEMO_NOTE}", []
        if not results:
            if "glob" not in tool_names:
                return "", f"You said: {question}\n\n{DEMO_NOTE}", []
            return (
                "The user asked something about this project. I should look at the workspace before answering.",
                "Let me look at the workspace first.",
                [{"name": "glob", "input": {"pattern": "*"}}],
            )
        listing = str(results[0].get("content", ""))
        if previous == "glob" and "file_read" in tool_names:
            names = [line.rstrip("/") for line in listing.splitlines() if line and not line.endswith("/")]
            readme = next((n for n in names if n.lower().startswith("readme")), names[0] if names else None)
            if readme:
                return (
                    "",
                    f"I found {len(listing.splitlines())} entries. Reading {readme}.",
                    [{"name": "file_read", "input": {"path": readme, "limit": 20}}],
                )
        excerpt = "\n".join(line.split("\t", 1)[-1] for line in listing.splitlines()[:5])
        answer = (
            f"You asked: {question or '(nothing)'}\n\nHere is the start of what I read:\n\n{excerpt}\n\n{DEMO_NOTE}"
        )
        return "", answer, []

    @staticmethod
    def _previous_tool(messages: list[dict[str, Any]]) -> str:
        for message in reversed(messages):
            if message["role"] == "assistant" and not isinstance(message["content"], str):
                for block in reversed(message["content"]):
                    if block.get("type") == "tool_use":
                        return str(block["name"])
        return ""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent | ModelReply, None]:
        thinking, text, calls = self._next_turn(request)
        if not calls and "Conclusion: success" in request.system:
            # A sub-agent is asked for its verdict (orchestrator/verdict.py); the demo's survey always succeeds.
            text += "\n\nConclusion: success"
        content: list[dict[str, Any]] = []
        index = 0
        if thinking:
            yield BlockStart(index, "thinking")
            for word in _words(thinking):
                await asyncio.sleep(self.delay)
                yield BlockDelta(index, word)
            yield BlockStop(index)
            # Shown, not kept: a thinking block needs a signature the real API
            # verifies, and a thread begun offline may go on with a key.
            index += 1
        yield BlockStart(index, "text")
        for word in _words(text):
            await asyncio.sleep(self.delay)
            yield BlockDelta(index, word)
        yield BlockStop(index)
        content.append({"type": "text", "text": text})
        for call in calls:
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_demo_{uuid.uuid4().hex[:16]}",
                    "name": call["name"],
                    "input": call["input"],
                }
            )
        prompt_size = sum(len(str(m["content"])) for m in request.messages) // 4
        yield ModelReply(
            content=content,
            stop_reason="tool_use" if calls else "end_turn",
            usage=TokenCount(input_tokens=prompt_size, output_tokens=len(_words(thinking + text))),
            model=self.info.id,
        )
