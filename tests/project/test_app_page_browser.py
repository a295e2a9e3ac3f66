"""The page Threadline serves at /app/ (issue #44 items 4 and 6) in a real headless Chromium, with
CopilotKit's published packages and no Node server in the path: the vite build of
examples/copilotkit in its app mode, served by a real ``manage.py serve`` that is also CopilotKit's
runtime, against the loopback fake Messages API. Two people sign in with Django's own login, each
in a browser of their own. Without Chromium, node or the npm packages the tests skip, saying why;
with REQUIRE_SERVICES=1 (CI) that is a failure.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.example_page import MESSAGES, Page, build_app_page, require_prerequisites
from tests.fakes.anthropic_api import FakeAnthropic, text_turn, tool_turn
from tests.procs import ServerProcess

APPROVAL = "[data-testid=approval]"
TOOL_RENDER = "[data-testid=copilot-tool-render]"
ROWS = "[data-testid=thread-row]"
PASSWORD = "a long password"
# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="session")
def app_page_built() -> None:
    require_prerequisites("the /app/ page's browser tests")
    if os.environ.get("EXAMPLE_SKIP_BUILD") != "1":
        build_app_page()


class Stack:
    """Threadline serving /app/, and a browser for each of two people signed in to it."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.fake = FakeAnthropic().__enter__()
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": self.fake.base_url}
        (base / "workspace").mkdir()
        self.threadline = ServerProcess(data_dir=base, workspace=base / "workspace", env=env).start()
        made = self.threadline.manage(
            "shell",
            "-c",
            "from django.contrib.auth.models import User\n"
            f"for name in ('alice', 'bob', 'carol'): User.objects.create_user(name, password={PASSWORD!r})",
        )
        assert made.returncode == 0, made.stderr
        self.pages: dict[str, Page] = {}

    def page(self, name: str) -> Page:
        """``name``'s browser, signed in on its first use."""
        if name not in self.pages:
            page = Page(profile=self.base / f"chromium-{name}", shots=self.base / f"screenshots-{name}")
            page.sign_in(f"{self.threadline.url}/app/", name, PASSWORD)
            self.pages[name] = page
        return self.pages[name]

    def open(self, name: str, thread: str) -> Page:
        page = self.page(name)
        page.open(f"{self.threadline.url}/app/?thread={thread}")
        return page

    def restart(self) -> None:
        self.threadline.stop()
        self.threadline.start()

    def close(self) -> None:
        for page in self.pages.values():
            page.close()
        self.threadline.stop()
        self.fake.__exit__(None, None, None)


@pytest.fixture(scope="module")
def stack(app_page_built: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    made = Stack(tmp_path_factory.mktemp("app-page"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(autouse=True)
def fresh_script(stack: Stack) -> None:
    stack.fake.reset()


def _thread_id(page: Page) -> str:
    return page.text("[data-testid=thread-id]")


def _listed(page: Page) -> list[str]:
    names: list[str] = page.eval(
        "[...document.querySelectorAll('[data-testid=thread-row] [data-testid=open-thread]')].map(b => b.innerText)"
    )
    return names


def _sees_whole_thread(page: Page) -> None:
    """Thread t-whole as its first two runs left it: messages, the write's tool render with its
    result, the files panel, and the second write's approval still open."""
    page.sees("Written notes.", MESSAGES)
    page.sees("write notes.txt", MESSAGES)
    page.do("waitFor", selector=f"{TOOL_RENDER}[data-tool-name=file_write][data-status=complete]")
    result: Any = page.eval(
        "document.querySelector('[data-testid=copilot-tool-render][data-tool-name=file_write]').dataset.result"
    )
    page.check("notes.txt" in str(result), f"the tool render has no result: {result!r}")
    page.sees("notes.txt", "[data-testid=files]")
    page.sees("Allow file_write to write second.txt", APPROVAL)


def test_a_thread_reopened_comes_back_whole_also_after_a_restart(stack):
    stack.fake.script(
        [
            tool_turn("file_write", {"path": "notes.txt", "content": "one\n"}, id="toolu_w1"),
            text_turn(["Written notes."]),
            tool_turn("file_write", {"path": "second.txt", "content": "two\n"}, id="toolu_w2"),
        ]
    )
    page = stack.open("alice", "t-whole")
    page.say("write notes.txt")
    page.sees("Allow file_write to write notes.txt", APPROVAL)
    page.click("[data-testid=approve]")
    page.sees("Written notes.", MESSAGES)
    page.say("write second.txt")
    page.sees("Allow file_write to write second.txt", APPROVAL)

    # Another thread, then back through the list.
    page.click("[data-testid=new-thread]")
    page.check(_thread_id(page) != "t-whole", "New thread did not open a new thread")
    page.check(page.count(APPROVAL) == 0, "the other thread's approval shows in a new thread")
    stack.fake.script([text_turn(["Hello in the other thread."])])
    page.say("hello there")
    page.sees("Hello in the other thread.", MESSAGES)
    page.sees("hello there", ROWS)
    page.click(f"{ROWS}[data-thread-id=t-whole] [data-testid=open-thread]")
    _sees_whole_thread(page)
    page.check(page.count(f"{MESSAGES} >> text=Hello in the other thread.") == 0, "the other thread's reply shows")
    # The browser's Back opens the other thread again, where the open approval does not hold up a message.
    page.eval("(history.back(), null)")
    page.sees("Hello in the other thread.", MESSAGES)
    stack.fake.script([text_turn(["Still here."])])
    page.say("and again")
    page.sees("Still here.", MESSAGES)
    page.eval("(history.forward(), null)")
    _sees_whole_thread(page)

    stack.restart()
    page.reload()
    _sees_whole_thread(page)
    stack.fake.script([text_turn(["Second written."])])
    page.click("[data-testid=approve]")
    page.sees("Second written.", MESSAGES)


def test_a_thread_is_renamed_archived_and_deleted_from_the_list(stack):
    stack.fake.script([text_turn(["One."]), text_turn(["Two."])])
    page = stack.open("alice", "t-keep")
    page.say("first of the list")
    page.sees("One.", MESSAGES)
    page.open(f"{stack.threadline.url}/app/?thread=t-gone")
    page.say("second of the list")
    page.sees("Two.", MESSAGES)
    page.sees("first of the list", ROWS)

    page.click(f"{ROWS}[data-thread-id=t-keep] [data-testid=rename]")
    page.fill(f"{ROWS}[data-thread-id=t-keep] [data-testid=rename-text]", "Kept and renamed")
    page.click(f"{ROWS}[data-thread-id=t-keep] [data-testid=rename-save]")
    page.sees("Kept and renamed", ROWS)

    page.click(f"{ROWS}[data-thread-id=t-keep] [data-testid=archive]")
    page.do("waitFor", selector=f"{ROWS}[data-thread-id=t-keep]", state="detached")
    page.click("[data-testid=show-archived]")
    page.sees("Kept and renamed", f"{ROWS}.archived")

    page.eval("(window.confirm = () => true, null)")
    page.click(f"{ROWS}[data-thread-id=t-gone] [data-testid=delete]")
    page.do("waitFor", selector=f"{ROWS}[data-thread-id=t-gone]", state="detached")
    page.check(_thread_id(page) != "t-gone", "the deleted thread is still open")

    page.reload()
    page.click("[data-testid=show-archived]")
    page.sees("Kept and renamed", f"{ROWS}.archived")
    page.check("second of the list" not in _listed(page), f"a deleted thread is listed: {_listed(page)}")
    page.open(f"{stack.threadline.url}/app/?thread=t-gone")
    page.check(page.count(f"{MESSAGES} >> text=Two.") == 0, "a deleted thread's messages came back")


def test_an_image_attached_reaches_the_model_and_shows_again_after_a_reload(stack):
    image = stack.base / "screenshot.png"
    image.write_bytes(PNG)
    stack.fake.script([text_turn(["A tiny image."])])
    page = stack.open("alice", "t-image")
    page.attach("[data-testid=copilot-chat-input] input[type=file], input[type=file]", image)
    page.do("waitFor", selector="[data-testid=copilot-attachment-queue] img")
    page.say("what is in this screenshot?")
    page.sees("A tiny image.", MESSAGES)
    sent = stack.fake.requests[-1].body["messages"][-1]["content"]
    images = [block for block in sent if isinstance(block, dict) and block.get("type") == "image"]
    assert [block["source"] for block in images] == [
        {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
    ]
    page.reload()
    page.sees("A tiny image.", MESSAGES)
    page.do("waitFor", selector=f"{MESSAGES} img")
    img = f"document.querySelector('{MESSAGES} img')"
    shown = page.eval(f"{img}.decode().then(() => [{img}.naturalWidth, {img}.naturalHeight])")
    page.check(shown == [1, 1], f"the image did not show again: {shown}")


def test_each_person_has_their_own_list_and_sees_nothing_of_anothers_thread(stack):
    stack.fake.script([text_turn(["Alice's secret reply."]), text_turn(["Bob's own reply."])])
    alice = stack.open("alice", "t-alices")
    alice.say("alice's private question")
    alice.sees("Alice's secret reply.", MESSAGES)

    bob = stack.open("bob", "t-bobs")
    bob.say("bob's question")
    bob.sees("Bob's own reply.", MESSAGES)
    bob.sees("bob's question", ROWS)
    bob.check(_listed(bob) == ["bob's question"], f"bob's list holds more than his thread: {_listed(bob)}")
    bob.open(f"{stack.threadline.url}/app/?thread=t-alices")
    bob.check(
        "Alice's secret" not in bob.text("body") and "private question" not in bob.text("body"),
        "bob sees alice's thread",
    )
    alice.reload()
    alice.check("bob's question" not in _listed(alice), f"alice's list holds bob's thread: {_listed(alice)}")


def test_a_long_list_is_read_a_page_at_a_time(stack):
    made = stack.threadline.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User\n"
        "from agents.models import Agent\n"
        "from threads.models import Thread\n"
        "carol, coder = User.objects.get(username='carol'), Agent.objects.get(name='coder')\n"
        "for n in range(55): Thread.objects.create(agui_thread_id=f't-carol-{n}', agent=coder, owner=carol, "
        "title=f'carol thread {n:02d}')",
    )
    assert made.returncode == 0, made.stderr
    page = stack.open("carol", "t-carol-new")
    page.sees("carol thread 54", ROWS)
    page.check(page.count(ROWS) == 50, f"the first page holds {page.count(ROWS)} threads")
    page.click("[data-testid=more-threads]")
    page.sees("carol thread 00", ROWS)
    page.check(page.count(ROWS) == 55, f"after Older threads the list holds {page.count(ROWS)}")
    page.check(page.count("[data-testid=more-threads]") == 0, "Older threads is offered with nothing older")
