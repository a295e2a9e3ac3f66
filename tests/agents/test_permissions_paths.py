"""A deny rule covers every path a call reads or writes: links are resolved before rules match,
and grep's and glob's results are filtered by the rules (issue #11, item 3)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from django.test import override_settings

from agents.models import PermissionRule
from agents.permissions import evaluate, rules_for
from agents.runtime import tool_context
from orchestrator.tools.base import ToolOutput, ToolRegistry
from orchestrator.tools.catalog import KNOWN_TOOLS
from orchestrator.tools.mutating import APPLY_PATCH, FILE_EDIT, FILE_WRITE
from orchestrator.tools.readonly import READ_ONLY_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hunter2-in-secrets"


@pytest.fixture
def ws(tmp_path: Path):
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "prod.env").write_text(f"PASSWORD={SECRET}\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("PASSWORD = None\n")
    os.symlink("../secrets/prod.env", root / "src" / "config.env")
    os.symlink("../secrets", root / "src" / "conf")
    PermissionRule.objects.create(position=1, tool="", match="secrets/**", decision=PermissionRule.Decision.DENY)
    with override_settings(AGENT_WORKSPACE=root, AGENT_MUTATING_TOOLS="on"):
        yield root


def call(name: str, **arguments: object) -> ToolOutput:
    registry = ToolRegistry.of((*READ_ONLY_TOOLS, FILE_WRITE, FILE_EDIT, APPLY_PATCH))
    return asyncio.run(registry.call(name, dict(arguments), tool_context(agent_name="coder", thread_id="t1")))


def verdict(tool: str, **arguments: object) -> PermissionRule.Decision:
    return evaluate(
        rules_for("coder", "t1"), tool=KNOWN_TOOLS[tool], arguments=arguments, remembered=False, auto_approve=True
    ).decision


def test_grep_over_the_workspace_leaves_out_denied_files(ws):
    out = call("grep", pattern="PASSWORD")
    assert SECRET not in out.content
    assert "src/app.py:1:PASSWORD = None" in out.content


def test_grep_with_an_include_of_the_denied_directory_finds_nothing(ws):
    assert SECRET not in call("grep", pattern="PASSWORD", include="secrets/*").content
    assert SECRET not in call("grep", pattern="PASSWORD", include="src/*").content


def test_glob_does_not_list_denied_paths(ws):
    listed = call("glob", pattern="**/*").content.splitlines()
    assert "src/app.py" in listed
    assert not [line for line in listed if "secrets" in line or "config.env" in line or "conf" in line]


def test_file_read_through_a_link_is_judged_on_the_file_it_reaches(ws):
    assert verdict("file_read", path="src/config.env") == PermissionRule.Decision.DENY
    assert verdict("file_read", path="src/conf/prod.env") == PermissionRule.Decision.DENY
    out = call("file_read", path="src/config.env")  # the tool refuses it even if a call gets through
    assert out.is_error and SECRET not in out.content


def test_writes_through_a_link_are_refused(ws):
    assert verdict("file_write", path="src/conf/new.env", content="x") == PermissionRule.Decision.DENY
    out = call("file_write", path="src/conf/new.env", content="x")
    assert out.is_error and not (ws / "secrets" / "new.env").exists()


def test_an_allow_rule_must_cover_the_path_the_link_reaches(ws):
    PermissionRule.objects.create(position=0, tool="file_read", match="src/**", decision=PermissionRule.Decision.ALLOW)
    assert verdict("file_read", path="src/app.py") == PermissionRule.Decision.ALLOW
    assert verdict("file_read", path="src/config.env") == PermissionRule.Decision.DENY


def test_paths_no_rule_denies_are_read_as_before(ws):
    out = call("file_read", path="src/app.py")
    assert not out.is_error and "PASSWORD = None" in out.content
