"""The CopilotKit example (examples/copilotkit) as its tests run it: the vite bundle built once,
its Node server as a real process, and a real headless Chromium driving the page.

The browser is Debian's Chromium (``/usr/bin/chromium`` or ``$CHROMIUM``) through
playwright-core, one command at a time (tests/clients/page_driver.mjs), so one browser
follows a scenario across restarts of the servers behind the page. A command that fails
takes a screenshot and says where it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agui_client import CLIENTS_DIR
from tests.procs import ROOT, free_port

EXAMPLE_DIR = ROOT / "examples" / "copilotkit"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
DRIVER = CLIENTS_DIR / "page_driver.mjs"
CHAT_INPUT = "[data-testid=copilot-chat-input] textarea"
MESSAGES = "[data-testid=copilot-message-list]"
SEND_BUTTON = "[data-testid=copilot-send-button]"


def missing_prerequisite() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (install Debian's: apt-get install -y chromium)"
    if shutil.which("node") is None:
        return "`node` is not on PATH"
    if not (CLIENTS_DIR / "node_modules" / "playwright-core" / "package.json").is_file():
        return "playwright-core is not installed (make install-test)"
    if not (EXAMPLE_DIR / "node_modules" / "@copilotkit" / "runtime" / "package.json").is_file():
        return "the example's packages are not installed (make install-test runs npm ci in examples/copilotkit)"
    return None


def require_prerequisites(what: str) -> None:
    """Skips the calling test, saying why, when ``what`` cannot run here; with REQUIRE_SERVICES=1
    (CI) that is a failure."""
    if (missing := missing_prerequisite()) is not None:
        reason = f"{what} did NOT run: {missing}"
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason}; REQUIRE_SERVICES=1 makes that a failure")
        pytest.skip(reason)


def build_page() -> None:
    """The vite bundle, once per test session (it takes a while)."""
    done = subprocess.run(
        ["npm", "run", "build", "--silent"], cwd=EXAMPLE_DIR, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"the example's page did not build:\n{done.stdout}\n{done.stderr}"


def build_app_page() -> None:
    """The page Threadline serves at /app/ (vite's app mode, into dist-app/), once per test session."""
    done = subprocess.run(
        ["node_modules/.bin/vite", "build", "--mode", "app", "--logLevel", "warn"],
        cwd=EXAMPLE_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"the page at /app/ did not build:\n{done.stdout}\n{done.stderr}"


class ExampleServer:
    """examples/copilotkit/server.mjs: the page and CopilotKit's runtime, on a port it keeps across restarts."""

    def __init__(self, *, threadline_url: str, token: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {
            **os.environ,
            "THREADLINE_URL": threadline_url,
            "THREADLINE_AGENT": "coder",
            "AGUI_TOKEN": token,
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "COPILOTKIT_TELEMETRY_DISABLED": "true",
            "SUPPRESS_TRANSFORMATION_WARNINGS": "true",
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ExampleServer:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["node", "server.mjs"], cwd=EXAMPLE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(self.url, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the example's server did not start:\n{self.log.read_text()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
                self.proc.wait(10)


class PageError(AssertionError):
    pass


class Page:
    """One headless Chromium page; every method waits (up to ``timeout_ms``) for what it needs."""

    def __init__(self, *, profile: Path, shots: Path, timeout_ms: int = 30_000) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        shots.mkdir(parents=True, exist_ok=True)
        self.shots = shots
        self.shot_count = 0
        options = {"chromium": CHROMIUM, "userDataDir": str(profile), "timeoutMs": timeout_ms}
        self.proc = subprocess.Popen(
            ["node", str(DRIVER), json.dumps(options)],
            cwd=CLIENTS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self._answer()
        assert ready.get("value") == "ready", ready

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise PageError(f"the browser driver ended (exit {self.proc.wait(10)})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def do(self, op: str, **command: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **command}) + "\n")
        self.proc.stdin.flush()
        answer = self._answer()
        if not answer["ok"]:
            raise PageError(f"{op} {command} failed: {answer['error']}\n{self.evidence()}")
        return answer["value"]

    def evidence(self) -> str:
        """A screenshot, the page's text and its console, for a failure's message."""
        self.shot_count += 1
        path = self.shots / f"failure-{self.shot_count}.png"
        lines = [f"screenshot: {path}"]
        for op, command in (("screenshot", {"path": str(path)}), ("text", {"selector": "body"}), ("console", {})):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": op, **command}) + "\n")
            self.proc.stdin.flush()
            answer = self._answer()
            if op != "screenshot":
                lines.append(f"{op}: {answer.get('value') if answer['ok'] else answer['error']}")
        return "\n".join(lines)

    def check(self, condition: bool, what: str) -> None:
        """An assertion about the page that, failing, shows the page."""
        if not condition:
            raise PageError(f"{what}\n{self.evidence()}")

    # What a person does and sees.

    def open(self, url: str) -> None:
        self.do("goto", url=url)
        self.do("waitFor", selector=CHAT_INPUT)

    def reload(self) -> None:
        self.do("reload")
        self.do("waitFor", selector=CHAT_INPUT)

    def say(self, text: str) -> None:
        self.do("fill", selector=CHAT_INPUT, value=text)
        # CopilotChat takes a message only once its agent is ready (the send button is enabled).
        self.do("waitFor", selector=f"{SEND_BUTTON}:enabled")
        self.do("press", selector=CHAT_INPUT, key="Enter")

    def sees(self, text: str, selector: str = "body") -> None:
        self.do("waitFor", selector=selector, text=text)

    def text(self, selector: str) -> str:
        value: str = self.do("text", selector=selector)
        return value

    def count(self, selector: str) -> int:
        value: int = self.do("count", selector=selector)
        return value

    def click(self, selector: str, text: str | None = None) -> None:
        self.do("click", selector=selector, **({} if text is None else {"text": text}))

    def attach(self, selector: str, path: Path) -> None:
        self.do("attach", selector=selector, path=str(path))

    def sign_in(self, url: str, name: str, password: str) -> None:
        """Open ``url`` on Threadline, be sent to Django's sign-in page, sign in and come back to it."""
        self.do("goto", url=url)
        self.do("waitFor", selector="#id_username")
        self.fill("#id_username", name)
        self.fill("#id_password", password)
        self.click("button[type=submit]")
        self.do("waitFor", selector=CHAT_INPUT)

    def fill(self, selector: str, value: str) -> None:
        self.do("fill", selector=selector, value=value)

    def eval(self, expression: str) -> Any:
        return self.do("eval", expression=expression)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(PageError):
                self.do("close")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
