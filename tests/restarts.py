"""A conversation that survives its server's restart, checked on more than one database."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.anthropic_api import FakeAnthropic, split_tokens, text_turn
from tests.helpers import run_input, unmarked, user, v1
from tests.procs import ServerProcess
from tests.sse import post_run


def conversation_survives_restart(tmp_path: Path, env: dict[str, str]) -> None:
    """A conversation goes on after its server process restarts (the SQLite test in test_restart,
    the PostgreSQL/Redis one in test_services)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember me\n")
    with FakeAnthropic() as fake:
        env = {"ANTHROPIC_API_KEY": "sk-fake", "ANTHROPIC_BASE_URL": fake.base_url, **env}
        server = ServerProcess(data_dir=tmp_path, workspace=workspace, env=env).start()
        try:
            fake.script([text_turn(split_tokens("First answer."))])
            first = post_run(
                server.url, "coder", v1(run_input("t-restart", "r1", user("one", "u1"))), token=server.token
            )
            assert first.types[-1] == "RUN_FINISHED"
            server.stop()
            server.start()
            hydrated = post_run(
                server.url, "coder", run_input("t-restart", "r-h", user("one", "u1")), token=server.token
            )
            assert hydrated.types == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
            assert [m["role"] for m in hydrated.events[1]["messages"]] == ["user", "assistant"]
            assert hydrated.events[2]["snapshot"]["tokenUsage"]["promptTokens"] == 25

            fake.script([text_turn(["Second answer."])])
            second = post_run(
                server.url,
                "coder",
                v1(run_input("t-restart", "r2", user("one", "u1"), user("two", "u2"))),
                token=server.token,
            )
            assert second.types[-1] == "RUN_FINISHED"
            history = fake.requests[-1].body["messages"]
            assert unmarked(history) == [
                {"role": "user", "content": [{"type": "text", "text": "one"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "First answer."}]},
                {"role": "user", "content": [{"type": "text", "text": "two"}]},
            ]
        finally:
            server.kill()
