"""What the tests that drive the ASGI application in a fresh interpreter share: the environment of
that process, and the script head that posts one run to the application without a server."""

from __future__ import annotations

import os
from pathlib import Path


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "DATABASE_URL", "DJANGO_"))}
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    return env | {
        "THREADLINE_DATA_DIR": str(tmp_path / "data"),
        "AGENT_WORKSPACE": str(workspace),
        "AGUI_TOKEN": "lean",
        "DEMO_MODEL_DELAY_SECONDS": "0",
        "LOG_LEVEL": "WARNING",
    }


ASGI_POST = """
import asyncio, json

from project.asgi import application

RUN_BODY = json.dumps({"threadId": "t1", "runId": "r1", "protocolVersion": "1.0", "tools": [], "context": [],
                       "messages": [{"id": "m1", "role": "user", "content": "what is in this project?"}],
                       "state": {}, "forwardedProps": {}}).encode()

def post_scope(token):
    return {"type": "http", "method": "POST", "path": "/agui/coder", "raw_path": b"/agui/coder",
            "query_string": b"", "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 80),
            "client": ("127.0.0.1", 1),
            "headers": [(b"authorization", b"Bearer " + token), (b"content-type", b"application/json")]}

def receiver(gone):
    asked = []
    async def receive():
        if not asked:
            asked.append(0)
            return {"type": "http.request", "body": RUN_BODY, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}
    return receive
"""
