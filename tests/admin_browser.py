"""The admin in a real headless browser: Debian's Chromium (``/usr/bin/chromium``, or ``$CHROMIUM``)
driven by playwright-core from a script of tests/clients/, one JSON spec in, one JSON result out.

Without Chromium or the npm harness a test that asks for ``browser`` skips with the reason; with
REQUIRE_SERVICES=1 (as CI sets, after installing Chromium) that is a failure instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agui_client import CLIENTS_DIR

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def browser_missing() -> str | None:
    if not Path(CHROMIUM).is_file():
        return f"no Chromium at {CHROMIUM} (install Debian's: apt-get install -y chromium)"
    if shutil.which("node") is None:
        return "`node` is not on PATH"
    if not (CLIENTS_DIR / "node_modules" / "playwright-core" / "package.json").is_file():
        return "playwright-core is not installed (npm ci --prefix tests/clients)"
    return None


@pytest.fixture
def browser() -> None:
    if (missing := browser_missing()) is None:
        return
    reason = f"the admin's browser test did NOT run: {missing}"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; REQUIRE_SERVICES=1 makes that a failure")
    pytest.skip(reason)


def drive(script: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Runs tests/clients/``script`` with ``spec`` (Chromium's path added) and returns what it wrote."""
    done = subprocess.run(
        ["node", str(CLIENTS_DIR / script)],
        input=json.dumps({"chromium": CHROMIUM, **spec}),
        capture_output=True,
        text=True,
        timeout=180,
        cwd=CLIENTS_DIR,
    )
    assert done.returncode == 0, f"the browser harness failed:\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result
