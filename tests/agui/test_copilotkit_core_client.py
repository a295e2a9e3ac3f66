"""CopilotKit's own browser-side core (@copilotkit/core, as examples/copilotkit installs it) against
Threadline's /copilotkit routes, with no CopilotKit runtime in between: it finds the agents and the
thread routes in /info, chats through run, reopens the thread through connect, and keeps the thread
list (rename, archive, unarchive, delete) as useThreads does (tests/clients/copilotkit_core.mjs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import text_turn
from threads.models import Thread

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "tests" / "clients" / "copilotkit_core.mjs"
CORE = ROOT / "examples" / "copilotkit" / "node_modules" / "@copilotkit" / "core" / "package.json"


def _drive(spec: dict) -> dict:
    if shutil.which("node") is None or not CORE.is_file():
        reason = "node, or @copilotkit/core in examples/copilotkit/node_modules (npm ci there), is missing"
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    done = subprocess.run(["node", str(DRIVER), json.dumps(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("transport", "resolved"),
    [
        (None, "rest"),  # core's default: GET /info answers, so the routes
        ("single", "single"),  # an app's useSingleEndpoint: every call a POST /copilotkit envelope
    ],
)
def test_copilotkits_core_chats_reopens_and_keeps_the_thread_list(server, fake_api, transport, resolved):
    fake_api.script([text_turn(["Hello ", "from Threadline."])])
    seen = _drive(
        {
            "runtimeUrl": f"{server.url}/copilotkit",
            "headers": {"Authorization": "Bearer test-token"},
            "agentId": "coder",
            "threadId": "t-core",
            "text": "say hello",
            **({"transport": transport} if transport else {}),
        }
    )
    server.drain()
    assert seen["errors"] == []
    assert "coder" in seen["agents"] and seen["transport"] == resolved
    assert seen["threadEndpoints"]["list"] is True and seen["threadEndpoints"]["mutations"] is True
    assert [m["role"] for m in seen["runMessages"]] == ["user", "assistant"]
    assert seen["runMessages"][1]["content"] == "Hello from Threadline."
    assert seen["connectedMessages"] == seen["runMessages"]
    assert seen["listed"] == [{"id": "t-core", "name": "say hello", "archived": False, "agentId": "coder"}]
    assert seen["renamed"] == "Renamed from CopilotKit"
    assert seen["archivedHidden"] is True and seen["unarchived"] is True
    assert seen["afterDelete"] == []
    assert not Thread.objects.exists()
