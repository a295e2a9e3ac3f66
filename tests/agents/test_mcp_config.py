"""MCP_SERVERS: the .mcp.json shape, checked at start-up; a bad file or entry stops start-up naming
the file, the server and the problem. Tool names: mcp__<server>__<tool>, shortened deterministically."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents.mcp.config import HTTP, STDIO, McpConfigError, load_servers, parse_servers
from agents.mcp.environment import server_environment
from agents.mcp.names import MAX_NAME, model_name, tool_name_matches, tool_names, unique_names
from agents.models import PermissionRule
from tests.procs import ROOT


def _parse(servers: dict, environ: dict | None = None):
    return parse_servers({"mcpServers": servers}, source="/etc/mcp.json", environ=environ or {})


def test_the_claude_code_shape_is_read():
    github, docs = _parse(
        {
            "github": {"command": "npx", "args": ["-y", "some-mcp-server"], "env": {"TOKEN": "${GITHUB_TOKEN}"}},
            "docs": {"type": "http", "url": "https://docs.example/mcp", "headers": {"Authorization": "Bearer ${KEY}"}},
        },
        {"GITHUB_TOKEN": "gh-1", "KEY": "k-2"},
    )
    assert github.transport == STDIO and github.args == ("-y", "some-mcp-server")
    assert docs.transport == HTTP
    assert "gh-1" not in repr(github)  # unexpanded until the server starts
    assert github.expanded({"GITHUB_TOKEN": "gh-1"}).env == {"TOKEN": "gh-1"}
    assert docs.expanded({"KEY": "k-2"}).headers == {"Authorization": "Bearer k-2"}
    assert _parse({"x": {"command": "run", "args": ["${MISSING:-fallback}"]}})[0].expanded({}).args == ["fallback"]


def test_a_stdio_entry_says_what_its_sandbox_shows_it():
    (notes,) = _parse(
        {"notes": {"command": "run", "paths": ["/srv/dicts", "${NOTES}:rw"], "network": False, "workspace": True}},
        {"NOTES": "/var/lib/notes"},
    )
    assert (notes.network, notes.workspace) == (False, True)
    assert notes.expanded({"NOTES": "/var/lib/notes"}).paths == ["/srv/dicts", "/var/lib/notes:rw"]
    (plain,) = _parse({"plain": {"command": "run"}})
    assert (plain.paths, plain.network, plain.workspace) == ((), True, False)  # network on by default


@pytest.mark.parametrize(
    ("servers", "problem"),
    [
        ({"broken": {"args": ["x"]}}, 'server \'broken\': needs either a "command" (stdio) or a "url" (http)'),
        ({"s": {"command": "x", "env": {"T": "${NOT_SET}"}}}, "server 's': ${NOT_SET} is not set"),
        ({"s": {"type": "sse", "url": "https://x"}}, "server 's': type 'sse' is not supported"),
        ({"s": {"command": "x", "args": "not a list"}}, "server 's': \"args\" must be a list of strings"),
        ({"s": {"url": "ftp://x"}}, "server 's': \"url\" must be an http:// or https:// URL"),
        ({"a__b": {"command": "x"}}, "server 'a__b': a server's name may not hold '__'"),
        ({"s": {"command": "x", "comand": "y"}}, "server 's': unknown field(s) comand"),
        ({"s": {"command": "x", "paths": "/srv"}}, "server 's': \"paths\" must be a list of strings"),
        ({"s": {"command": "x", "paths": ["srv:rw"]}}, "server 's': \"paths\": 'srv:rw' is not an absolute path"),
        ({"s": {"command": "x", "network": "off"}}, "server 's': \"network\" must be true or false"),
        ({"s": {"url": "https://x", "paths": []}}, "server 's': \"paths\" is for stdio servers"),
    ],
)
def test_a_bad_entry_is_named(servers, problem):
    """Including what its sandbox shows a stdio server (issue #46)."""
    with pytest.raises(McpConfigError) as raised:
        _parse(servers)
    assert str(raised.value).startswith("/etc/mcp.json: ") and problem in str(raised.value)


def test_a_malformed_file_is_named(tmp_path: Path):
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": {')
    with pytest.raises(McpConfigError, match=r"\.mcp\.json: not valid JSON"):
        load_servers(path)
    path.write_text('{"servers": {}}')
    with pytest.raises(McpConfigError, match='expected an object with "mcpServers"'):
        load_servers(path)


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ('{"mcpServers": {', "not valid JSON"),
        ('{"mcpServers": {"broken": {"args": []}}}', "server 'broken': needs either"),
    ],
)
def test_a_bad_file_stops_start_up(tmp_path: Path, document: str, said: str):
    path = tmp_path / "servers.json"
    path.write_text(document)
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environ.update({"THREADLINE_DATA_DIR": str(tmp_path / "data"), "MCP_SERVERS": str(path)})
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "McpConfigError" in result.stderr and str(path) in result.stderr and said in result.stderr


def test_names_are_prefixed_and_made_safe():
    named = tool_names("github", ["create_issue", "search.code", "a b"])
    assert named["create_issue"] == "mcp__github__create_issue"
    # A replaced character would let "search.code" and "search_code" share a name: hashed instead.
    assert re.fullmatch(r"mcp__github__search_code_[0-9a-f]{8}", named["search.code"])
    assert re.fullmatch(r"mcp__github__a_b_[0-9a-f]{8}", named["a b"])
    assert named["search.code"] != model_name("github", "search_code") == "mcp__github__search_code"


def test_a_long_name_is_shortened_the_same_way_every_time():
    long = "search_every_page_of_the_handbook_for_a_word_and_return_the_pages"
    (first,) = tool_names("docs", [long]).values()
    assert len(first) == MAX_NAME and first.startswith("mcp__docs__search_every_page")
    assert tool_names("docs", [long]) == {long: first}  # deterministic
    assert tool_names("docs", ["other", long])[long] == first  # whatever else the server lists


def test_names_that_sanitise_alike_across_servers_stay_apart():
    # x/_y and x_/y were both mcp__x___y: an allow rule for one ran the other (issue #49 item 10).
    assert model_name("x", "_y") == "mcp__x___y"
    assert model_name("x_", "y") != "mcp__x___y" and model_name("x_", "y").startswith("mcp__x___y_")
    names, clashes = unique_names([("x", "_y"), ("x_", "y"), ("gh", "a.b"), ("gh", "a_b")])
    assert len(set(names.values())) == 4 and not clashes


def test_a_name_that_ends_like_a_digest_is_hashed_itself():
    assert model_name("x", "y_1a2b3c4d") != "mcp__x__y_1a2b3c4d"


def test_a_name_two_tools_would_share_is_refused_for_both_naming_them():
    names, (clash,) = unique_names([("gh", "read"), ("gh", "list")], taken=["mcp__gh__read"])
    assert names == {("gh", "list"): "mcp__gh__list"}
    assert str(clash) == (
        "Threadline's tool 'mcp__gh__read' and the tool 'read' of MCP server 'gh' would all be named "
        "'mcp__gh__read' for the model; none of them is offered"
    )


def test_a_rules_tool_may_be_a_glob_over_names(db):
    assert tool_name_matches("mcp__github__*", "mcp__github__create_issue")
    assert not tool_name_matches("mcp__github__*", "mcp__gitlab__create_issue")
    assert tool_name_matches("mcp__*", "mcp__docs__search") and not tool_name_matches("mcp__*", "bash")
    for tool in ("mcp__github__*", "mcp__github__create_issue", "file_read"):
        PermissionRule(position=1, tool=tool, decision="deny").full_clean()
    with pytest.raises(Exception, match="No tool is called"):
        PermissionRule(position=1, tool="nonsense", decision="deny").full_clean()


def test_a_stdio_servers_environment_is_its_own_plus_the_basics():
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "AGUI_TOKEN": "t",
        "DJANGO_SECRET_KEY": "s",
        "ANTHROPIC_API_KEY": "k",
        "DATABASE_URL": "postgresql://x",
        "REDIS_URL": "redis://x",
    }
    assert server_environment({"TOKEN": "mine"}, parent) == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TOKEN": "mine",
    }


def test_the_shape_example_on_the_mcp_page_parses():
    page = (ROOT / "docs" / "mcp.md").read_text()
    start = page.index("```json") + len("```json")
    document = json.loads(page[start : page.index("```", start)])
    assert {
        server.name
        for server in parse_servers(document, source="docs/mcp.md", environ={"GITHUB_TOKEN": "x", "DOCS_KEY": "y"})
    }
