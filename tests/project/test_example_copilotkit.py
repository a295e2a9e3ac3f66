"""The CopilotKit example (examples/copilotkit) in a real headless Chromium: what a person sees.

Threadline runs as a real server process against the loopback fake Messages API, the
example's Node server (CopilotKit's runtime with ThreadlineAgentRunner) as another, and
one Chromium page drives them as a person would. Each test has a thread of its own (the
page keeps its thread in its address). Without Chromium, node or the npm packages the
tests skip, saying why; with REQUIRE_SERVICES=1 (CI) that is a failure.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.example_page import MESSAGES, ExampleServer, Page, build_page, require_prerequisites
from tests.fakes.anthropic_api import FakeAnthropic, split_tokens, text, text_turn, thinking, tool_turn, turn
from tests.mcp_world import elicit_stdio
from tests.procs import ServerProcess

APPROVAL = "[data-testid=approval]"
QUESTION = "[data-testid=question]"
ELICITATION = "[data-testid=elicitation]"


@pytest.fixture(scope="session")
def example_page_built() -> None:
    require_prerequisites("the CopilotKit example's browser tests")
    if os.environ.get("EXAMPLE_SKIP_BUILD") != "1":
        build_page()


class Stack:
    """Threadline, the example's server and a browser page, for one module's scenarios."""

    def __init__(self, base: Path) -> None:
        self.workspace = base / "workspace"
        self.workspace.mkdir()
        self.fake = FakeAnthropic().__enter__()
        servers = base / ".mcp.json"  # a server whose tools ask the person mid-call (issue #46)
        servers.write_text(json.dumps({"mcpServers": {"shop": elicit_stdio()}}))
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": self.fake.base_url, "MCP_SERVERS": str(servers)}
        self.threadline = ServerProcess(data_dir=base, workspace=self.workspace, env=env).start()
        self.example = ExampleServer(
            threadline_url=self.threadline.url, token=self.threadline.token, log=base / "example.log"
        ).start()
        self.page = Page(profile=base / "chromium-profile", shots=base / "screenshots")

    def open(self, thread: str) -> Page:
        self.page.open(f"{self.example.url}/?thread={thread}")
        return self.page

    def close(self) -> None:
        self.page.close()
        self.example.stop()
        self.threadline.stop()
        self.fake.__exit__(None, None, None)

    def tool_results(self) -> list[Any]:
        """What the model was last told its tool calls returned."""
        last = self.fake.requests[-1].body["messages"][-1]["content"]
        return [block["content"] for block in last if isinstance(block, dict) and block.get("type") == "tool_result"]


@pytest.fixture(scope="module")
def stack(example_page_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    made = Stack(tmp_path_factory.mktemp("copilotkit-example"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(autouse=True)
def fresh_script(stack: Stack) -> None:
    """Each test scripts the model from scratch, whatever an earlier one left queued."""
    stack.fake.reset()


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def test_a_person_chats_and_reads_the_reply(stack):
    stack.fake.script([text_turn(["Hello from ", "Threadline."])])
    page = stack.open("t-chat")
    page.say("hello")
    page.sees("Hello from Threadline.", MESSAGES)
    page.sees("hello", MESSAGES)


def test_the_agent_changes_the_page_with_a_browser_tool_and_goes_on(stack):
    stack.fake.script(
        [tool_turn("change_theme", {"theme": "dark"}, id="toolu_theme"), text_turn(["The page is dark now."])]
    )
    page = stack.open("t-theme")
    assert page.eval("document.documentElement.dataset.theme") == "light"
    page.say("make it dark")
    page.sees("The page is dark now.", MESSAGES)
    page.check(page.eval("document.documentElement.dataset.theme") == "dark", "the page did not turn dark")
    assert "now dark" in _result_text(stack.tool_results()[0])


def test_an_approved_write_happens(stack):
    stack.fake.script(
        [tool_turn("file_write", {"path": "approved.txt", "content": "yes\n"}, id="toolu_ok"), text_turn(["Written."])]
    )
    page = stack.open("t-approve")
    page.say("write approved.txt")
    page.sees("Allow file_write to write approved.txt (4 bytes, 1 line)?", APPROVAL)
    page.click("[data-testid=approve]")
    page.sees("Written.", MESSAGES)
    assert (stack.workspace / "approved.txt").read_text() == "yes\n"
    page.check(page.count(APPROVAL) == 0, "the approval is still shown after the answer")


def test_approve_always_does_not_ask_again(stack):
    stack.fake.script(
        [
            tool_turn("file_write", {"path": "always.txt", "content": "one\n"}, id="toolu_a1"),
            text_turn(["First written."]),
        ]
    )
    page = stack.open("t-always")
    page.say("write always.txt")
    page.sees("always.txt", APPROVAL)
    page.click("[data-testid=approve-always]")
    page.sees("First written.", MESSAGES)
    stack.fake.script(
        [
            tool_turn("file_write", {"path": "always.txt", "content": "two\n"}, id="toolu_a2"),
            text_turn(["Second written."]),
        ]
    )
    page.say("write it again")
    page.sees("Second written.", MESSAGES)
    page.check(page.count(APPROVAL) == 0, "the second write asked again")
    assert (stack.workspace / "always.txt").read_text() == "two\n"


def test_a_denial_with_a_reason_writes_nothing_and_the_model_reads_the_reason(stack):
    stack.fake.script(
        [
            tool_turn("file_write", {"path": "denied.txt", "content": "no\n"}, id="toolu_no"),
            text_turn(["Understood: not in this folder, so I left it."]),
        ]
    )
    page = stack.open("t-deny")
    page.say("write denied.txt")
    page.sees("denied.txt", APPROVAL)
    page.fill("[data-testid=deny-reason]", "not in this folder")
    page.click("[data-testid=deny]")
    page.sees("Understood: not in this folder", MESSAGES)
    assert not (stack.workspace / "denied.txt").exists()
    assert "not in this folder" in _result_text(stack.tool_results()[0])


def test_a_question_is_answered_in_words(stack):
    stack.fake.script(
        [tool_turn("ask_user", {"question": "Which file?"}, id="toolu_ask"), text_turn(["I will read notes.txt."])]
    )
    page = stack.open("t-question")
    page.say("read a file")
    page.sees("Which file?", QUESTION)
    page.fill("[data-testid=answer-text]", "notes.txt")
    page.click("[data-testid=answer]")
    page.sees("I will read notes.txt.", MESSAGES)
    assert "notes.txt" in _result_text(stack.tool_results()[0])


def test_an_mcp_servers_question_is_a_form_drawn_from_its_schema_and_the_tool_gets_the_answer(stack):
    stack.fake.script([tool_turn("mcp__shop__book", {}, id="toolu_book"), text_turn(["Booked for you."])])
    page = stack.open("t-elicit")
    page.say("book me seats")
    page.sees("Allow the MCP server shop to run its tool book?", APPROVAL)
    page.click("[data-testid=approve]")
    page.sees("How many seats, and for whom?", ELICITATION)
    page.sees("The MCP server shop asks, for its tool book", ELICITATION)
    page.sees("Seats *", ELICITATION)
    page.fill("[data-testid=elicit-seats]", "3")
    page.fill("[data-testid=elicit-name]", "Ann")
    page.click("[data-testid=elicitation-accept]")
    page.sees("Booked for you.", MESSAGES)
    assert _result_text(stack.tool_results()[0]) == 'book done with {"name": "Ann", "seats": 3}'


def test_an_mcp_servers_sign_in_page_shows_its_domain_first(stack):
    stack.fake.script([tool_turn("mcp__shop__sign_in", {}, id="toolu_in"), text_turn(["Signed in."])])
    page = stack.open("t-elicit-url")
    page.say("sign me in")
    page.sees("Allow the MCP server shop to run its tool sign_in?", APPROVAL)
    page.click("[data-testid=approve]")
    page.sees("login.example.com", "[data-testid=elicitation-domain]")
    page.click("[data-testid=elicitation-decline]")
    page.sees("Signed in.", MESSAGES)
    assert _result_text(stack.tool_results()[0]) == "sign_in: the person chose decline"


def test_the_state_panels_fill_in_live(stack):
    todos = [
        {"id": "1", "content": "Read the notes", "status": "completed"},
        {"id": "2", "content": "Write the summary", "status": "in_progress"},
    ]
    stack.fake.script(
        [
            tool_turn("todo_write", {"todos": todos}, id="toolu_plan"),
            tool_turn("file_write", {"path": "summary.md", "content": "short\n"}, id="toolu_sum"),
            tool_turn("sub_agent", {"task": "Check the summary", "role": "reviewer"}, id="toolu_child"),
            text_turn(["The summary reads well."]),  # the sub-agent's answer
            text_turn(["All done."]),
        ]
    )
    page = stack.open("t-panels")
    page.eval("window.__samePage = true")
    page.say("plan, write and review")
    page.sees("Allow todo_write to set the plan (2 items)?", APPROVAL)
    page.click("[data-testid=approve]")
    page.sees("Write the summary", "[data-testid=plan]")
    page.sees("summary.md", APPROVAL)
    page.click("[data-testid=approve]")
    page.sees("summary.md", "[data-testid=files]")
    page.sees("All done.", MESSAGES)
    page.sees("reviewer", "[data-testid=subagents]")
    page.sees("The summary reads well.", "[data-testid=subagents]")
    # Five model calls of 25 prompt tokens each (the sub-agent's included) were spent; the context
    # gauge shows the latest call of the thread's own, not their sum.
    page.sees("125 /", "[data-testid=spent-tokens]")
    page.check(page.text("[data-testid=prompt-tokens]") == "25", "the context gauge is not the latest prompt")
    page.check(page.text("[data-testid=cost]") != "$0.000000", "no cost counted")
    page.check(page.eval("window.__samePage === true"), "the page reloaded to show the panels")


def test_a_reload_shows_the_thread_again(stack):
    stack.fake.script([text_turn(["Remember this reply."])])
    page = stack.open("t-reload")
    page.say("say something memorable")
    page.sees("Remember this reply.", MESSAGES)
    page.reload()
    page.sees("Remember this reply.", MESSAGES)
    page.sees("say something memorable", MESSAGES)


def _ask_and_restart(stack: Stack, thread: str, restart: Any) -> Page:
    """A write waits for approval; one of the servers restarts; the page is reloaded."""
    stack.fake.script(
        [
            tool_turn("file_write", {"path": f"{thread}.txt", "content": "kept\n"}, id=f"toolu_{thread}"),
            text_turn(["Written after the restart."]),
        ]
    )
    page = stack.open(thread)
    page.say(f"write {thread}.txt please")
    page.sees(f"{thread}.txt", APPROVAL)
    restart()
    page.reload()
    return page


def _answer_after_restart(stack: Stack, page: Page, thread: str) -> None:
    page.sees(f"write {thread}.txt please", MESSAGES)
    page.sees(f"Allow file_write to write {thread}.txt", APPROVAL)
    page.check(page.text("[data-testid=prompt-tokens]") not in ("", "0"), "the token panel came back empty")
    page.click("[data-testid=approve]")
    page.sees("Written after the restart.", MESSAGES)
    assert (stack.workspace / f"{thread}.txt").read_text() == "kept\n"


def test_a_restart_of_the_example_server_loses_nothing_on_the_page(stack):
    def restart() -> None:
        stack.example.stop()
        stack.example.start()

    page = _ask_and_restart(stack, "t-node-restart", restart)
    _answer_after_restart(stack, page, "t-node-restart")


def test_a_restart_of_threadline_loses_nothing_on_the_page(stack):
    def restart() -> None:
        stack.threadline.stop()
        stack.threadline.start()

    page = _ask_and_restart(stack, "t-threadline-restart", restart)
    _answer_after_restart(stack, page, "t-threadline-restart")


def test_a_wrong_token_shows_a_readable_error(stack, tmp_path):
    wrong = ExampleServer(threadline_url=stack.threadline.url, token="not-the-token", log=tmp_path / "wrong.log")
    wrong.start()
    try:
        page = stack.page
        page.open(f"{wrong.url}/?thread=t-wrong-token")
        page.say("hello")
        page.sees("AG-UI token is wrong or missing", "[data-testid=error]")
    finally:
        wrong.stop()


def _shot(page: Page, name: str) -> None:
    """A screenshot of what the person sees, kept beside the failure shots for a person to look at."""
    page.do("screenshot", path=str(page.shots / f"{name}.png"))


def test_a_reload_with_threadline_down_says_so_and_a_retry_brings_the_thread_back(stack):
    stack.fake.script([text_turn(["Still here after the outage."])])
    page = stack.open("t-down")
    page.say("remember me")
    page.sees("Still here after the outage.", MESSAGES)
    stack.threadline.stop()
    try:
        page.reload()
        page.sees(f"Threadline could not be reached at {stack.threadline.url}", "[data-testid=error]")
        page.sees("Start Threadline (make run) or point THREADLINE_URL at it, then retry.", "[data-testid=error]")
        _shot(page, "threadline-down")
        page.check(page.count("[data-testid=retry]") == 1, "the page does not offer to retry")
    finally:
        stack.threadline.start()
    page.click("[data-testid=retry]")
    page.sees("Still here after the outage.", MESSAGES)
    page.sees("remember me", MESSAGES)
    page.check(page.count("[data-testid=error]") == 0, "the error is still shown after the retry")


def test_a_reload_with_a_wrong_token_says_which_token_to_fix(stack, tmp_path):
    stack.fake.script([text_turn(["Written with the right token."])])
    page = stack.open("t-reload-wrong-token")
    page.say("hello")
    page.sees("Written with the right token.", MESSAGES)
    wrong = ExampleServer(threadline_url=stack.threadline.url, token="not-the-token", log=tmp_path / "wrong.log")
    wrong.start()
    try:
        page.open(f"{wrong.url}/?thread=t-reload-wrong-token")
        page.sees("Threadline refused this page's server (HTTP 401", "[data-testid=error]")
        page.sees("Set AGUI_TOKEN where the example's server runs", "[data-testid=error]")
        _shot(page, "wrong-token")
        page.check(page.count("[data-testid=retry]") == 1, "the page does not offer to retry")
        page.check("Written with the right token." not in page.text(MESSAGES), "a refused token showed the thread")
    finally:
        wrong.stop()


class _Overloaded(BaseHTTPRequestHandler):
    """A Threadline that answers every request with a 503, as a proxy in front of a sick one would."""

    def _refuse(self) -> None:
        body = b'{"error": {"code": "overloaded", "message": "the server is overloaded", "field": null}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_reload_when_threadline_answers_5xx_says_so(stack, tmp_path):
    overloaded = ThreadingHTTPServer(("127.0.0.1", 0), _Overloaded)
    serving = threading.Thread(target=overloaded.serve_forever, daemon=True)
    serving.start()
    sick = ExampleServer(
        threadline_url=f"http://127.0.0.1:{overloaded.server_address[1]}", token="proc-token", log=tmp_path / "5xx.log"
    )
    sick.start()
    try:
        page = stack.page
        page.open(f"{sick.url}/?thread=t-5xx")
        page.sees("Threadline answered with an error (HTTP 503: the server is overloaded)", "[data-testid=error]")
        page.sees("Check Threadline's log, then retry.", "[data-testid=error]")
        page.check(page.count("[data-testid=retry]") == 1, "the page does not offer to retry")
    finally:
        sick.stop()
        overloaded.shutdown()
        overloaded.server_close()


def test_a_run_in_flight_is_followed_after_a_restart_of_the_example_server(stack):
    # message_start, ping, content_block_start, the first delta; then the stream holds.
    hanging = text_turn(["Half of the answer, ", "and the other half."]).pause(after_events=4, timeout=60)
    stack.fake.script([hanging])
    page = stack.open("t-in-flight")
    page.say("a long answer, please")
    page.sees("Half of the answer,", MESSAGES)
    assert hanging.paused.wait(30)
    stack.example.stop()
    stack.example.start()
    page.reload()
    page.sees("a long answer, please", MESSAGES)
    page.sees("Half of the answer,", MESSAGES)
    hanging.resume.set()
    page.sees("Half of the answer, and the other half.", MESSAGES)


def test_stop_on_the_page_cancels_the_run_on_threadline(stack):
    slow = text_turn(split_tokens("a long answer that will be cut short")).pause(after_events=5, timeout=60)
    stack.fake.script([slow])
    page = stack.open("t-stop")
    page.say("go on and on")
    page.sees("a long", MESSAGES)
    assert slow.paused.wait(30)
    page.click("[data-testid=copilot-send-button]")  # while a run goes on, it is the stop button
    _wait_for_line(stack.example.log, "Threadline: cancelled run")
    slow.resume.set()
    with httpx.stream(
        "GET", f"{stack.threadline.url}/agui/coder/threads/t-stop/events", headers=stack.threadline.headers, timeout=30
    ) as events:
        frames = [json.loads(line[5:]) for line in events.iter_lines() if line.startswith("data:")]
    assert frames[-2:] == [
        {"type": "CUSTOM", "name": "threadline.cancelled", "value": {"reason": "cancelled"}},
        {"type": "RUN_FINISHED", "threadId": "t-stop", "runId": frames[0]["runId"]},
    ]


def _wait_for_line(log: Path, text: str) -> None:
    """Until the process has written ``text`` to its log (not a timing assertion: it waits for a fact)."""
    deadline = time.monotonic() + 30
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"{text!r} never appeared in {log}:\n{log.read_text()}"
        time.sleep(0.1)


def test_a_reload_does_not_move_the_reasoning_after_the_answer(stack):
    stack.fake.script([turn(thinking("Pondering the question."), text("The answer comes last."))])
    page = stack.open("t-reasoning")
    page.say("think first")
    page.sees("The answer comes last.", MESSAGES)
    page.reload()
    page.sees("The answer comes last.", MESSAGES)
    shown = page.text(MESSAGES)
    page.check(shown.rstrip().endswith("The answer comes last."), f"something came after the answer: {shown!r}")


def test_a_patch_to_approve_shows_its_files_and_its_diff(stack):
    patch = "--- a/app.py\n+++ b/app.py\n@@ -1 +1,2 @@\n-print(1)\n+print(2)\n+print(3)\n"
    stack.fake.script([tool_turn("apply_patch", {"patch": patch}, id="toolu_patch"), text_turn(["Left as it is."])])
    page = stack.open("t-patch")
    page.say("patch app.py")
    page.sees("Allow apply_patch to change 1 file?", APPROVAL)
    page.sees("app.py +2 -1", APPROVAL)
    page.sees("+print(3)", "[data-testid=approval-diff]")
    page.click("[data-testid=deny]")
    page.sees("Left as it is.", MESSAGES)
