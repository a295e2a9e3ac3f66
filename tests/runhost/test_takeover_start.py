"""A run whose process died before its first step was committed (issue #45): between opening the run
and committing the user's turn a process opens the workspace and connects the agent's MCP servers, on a
loaded machine a second or more. Such a run is taken over from its start record (threads/takeover.py
``start_record``, written with the run) and starts over with its message, rather than ending
interrupted: the kill loop of 100 runs lost 2 that way."""

from __future__ import annotations

import time

import orjson

from tests.fakes.anthropic_api import FakeAnthropic, text_turn
from tests.procs import ServerProcess
from tests.replayed import verified
from tests.sse import get_stream

# What run_open does for a client's first message, in the server's own database, with the run then
# left as a process that died before its first step leaves it: owned by a process that is gone.
OPENED_AND_DIED = """
import subprocess, socket, sys
from threads.models import Run
from threads.services.runs import run_open
message = {"id": "u1", "role": "user", "content": "Begin, please."}
opened = run_open(
    agent_name="coder", agui_thread_id="t-start", agui_run_id="r1", new_user_message=message,
    protocol_version="1", live_run_ids=set(), content="Begin, please.", client_tools=[],
)
child = subprocess.Popen([sys.executable, "-c", "pass"]); child.wait()
Run.objects.filter(pk=opened.run.pk).update(owner=f"{socket.gethostname()}:{child.pid}")
"""


def test_a_run_whose_process_died_before_its_first_step_starts_over_with_its_message(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeAnthropic() as fake:
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, "WAIT_SWEEP_SECONDS": "0.2"}
        server = ServerProcess(data_dir=tmp_path, workspace=workspace, env=env)
        assert server.manage("migrate", "-v", "0").returncode == 0
        opened = server.manage("shell", "-c", OPENED_AND_DIED)
        assert opened.returncode == 0, opened.stderr
        fake.script([text_turn(["Started ", "over."])])
        server.start()
        try:
            url = f"{server.url}/agui/coder/threads/t-start/runs/r1/events"
            deadline = time.monotonic() + 30
            replay = get_stream(url, token=server.token)
            while "RUN_FINISHED" not in replay.types and time.monotonic() < deadline:
                time.sleep(0.2)
                replay = get_stream(url, token=server.token)
        finally:
            server.kill()
    assert replay.types[0] == "RUN_STARTED" and replay.types[-1] == "RUN_FINISHED", replay.types
    assert replay.types.count("RUN_STARTED") == 1
    taken = next(e for e in replay.events if e["type"] == "CUSTOM")
    assert taken["name"] == "threadline.takeover" and taken["value"]["kind"] == "crash"
    assert taken["value"]["step"] == 0
    text = "".join(e["delta"] for e in replay.events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Started over."
    # The model was asked once, with the message the run was opened with.
    (request,) = fake.requests
    assert request.body["messages"][-1]["role"] == "user"
    assert orjson.dumps(request.body["messages"][-1]["content"]).decode().count("Begin, please.") == 1
    client = verified("1", replay.body, thread_id="t-start", run_id="r1")
    assert client["error"] is None, client["error"]
    assert client["messages"][-1]["content"] == "Started over."
