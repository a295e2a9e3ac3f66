"""The protocol page (docs/protocol.md) says what the server does."""

from __future__ import annotations

from pathlib import Path

import httpx

PAGE = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def _row(route: str) -> str:
    return next(line for line in PAGE.read_text().splitlines() if line.startswith(f"| `{route}`"))


def test_the_protocol_page_says_info_needs_the_token_as_it_does(server):
    assert httpx.get(f"{server.url}/agui/info").status_code == 401
    assert httpx.get(f"{server.url}/agui/info", headers={"Authorization": "Bearer test-token"}).status_code == 200
    row = _row("GET /agui/info")
    assert "token required" in row
    assert "No credentials." not in row
