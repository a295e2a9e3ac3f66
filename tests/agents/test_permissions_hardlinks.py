"""A deny rule is not passed by a hard link: a file the tools open is judged by every name it has in the
workspace, when a deny rule is in scope (issue #23, item 7). Through the real tools and rules."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from django.test import override_settings

from agents.models import PermissionRule
from agents.runtime import tool_context
from orchestrator.tools import workspace as workspace_module
from orchestrator.tools.base import ToolOutput, ToolRegistry
from orchestrator.tools.mutating import APPLY_PATCH, FILE_EDIT, FILE_WRITE
from orchestrator.tools.readonly import READ_ONLY_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hunter2-in-secrets"
LINKED = "another name (a hard link) of a file a permission rule denies"


@pytest.fixture
def ws(tmp_path: Path):
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "prod.env").write_text(f"PASSWORD={SECRET}\n")
    (root / "notes").mkdir()
    os.link(root / "secrets" / "prod.env", root / "notes" / "prod.txt")  # what `ln` in bash makes
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("PASSWORD = None\n")
    PermissionRule.objects.create(position=1, tool="", match="secrets/**", decision=PermissionRule.Decision.DENY)
    with override_settings(AGENT_WORKSPACE=root, AGENT_MUTATING_TOOLS="on"):
        yield root


def call(name: str, **arguments: object) -> ToolOutput:
    registry = ToolRegistry.of((*READ_ONLY_TOOLS, FILE_WRITE, FILE_EDIT, APPLY_PATCH))
    return asyncio.run(registry.call(name, dict(arguments), tool_context(agent_name="coder", thread_id="t1")))


def test_file_read_of_a_hard_link_to_a_denied_file_is_refused(ws):
    out = call("file_read", path="notes/prod.txt")
    assert out.is_error
    assert out.content == f"notes/prod.txt: is {LINKED} file_read"
    assert SECRET not in out.content


def test_grep_leaves_out_a_hard_link_to_a_denied_file(ws):
    out = call("grep", pattern="PASSWORD")
    assert SECRET not in out.content
    assert "src/app.py:1:PASSWORD = None" in out.content
    named = call("grep", pattern="PASSWORD", path="notes/prod.txt")
    assert named.is_error and LINKED in named.content


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("file_edit", {"path": "notes/prod.txt", "old_string": f"PASSWORD={SECRET}", "new_string": "x"}),
        ("file_write", {"path": "notes/prod.txt", "content": "replaced\n"}),
        (
            "apply_patch",
            {"patch": f"--- notes/prod.txt\n+++ notes/prod.txt\n@@ -1 +1 @@\n-PASSWORD={SECRET}\n+PASSWORD=probe\n"},
        ),
    ],
)
def test_the_tools_that_read_before_they_write_refuse_it_too(ws, tool, arguments):
    out = call(tool, **arguments)
    assert out.is_error and LINKED in out.content, out.content
    # Neither name changed, and an edit could not tell the model whether its guess matched.
    assert (ws / "secrets" / "prod.env").read_text() == f"PASSWORD={SECRET}\n"
    assert os.stat(ws / "notes" / "prod.txt").st_ino == os.stat(ws / "secrets" / "prod.env").st_ino


def test_a_hard_link_whose_other_name_is_outside_the_workspace_is_read(ws, tmp_path):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("shared with a store outside\n")
    os.link(outside, ws / "src" / "vendored.txt")  # as pnpm links a package from its store
    assert call("file_read", path="src/vendored.txt").content == "1\tshared with a store outside"


def test_hard_links_between_files_no_rule_denies_are_read(ws):
    os.link(ws / "src" / "app.py", ws / "src" / "copy.py")
    assert call("file_read", path="src/copy.py").content == "1\tPASSWORD = None"
    assert "src/copy.py:1:PASSWORD = None" in call("grep", pattern="PASSWORD").content


def test_without_a_deny_rule_in_scope_a_hard_link_is_read(ws):
    PermissionRule.objects.all().delete()
    assert SECRET in call("file_read", path="notes/prod.txt").content


def test_a_workspace_too_large_to_walk_refuses_a_hard_linked_file(ws, monkeypatch):
    """The bound on the walk is a constant of the mechanism; lowering it stands in for a huge checkout."""
    monkeypatch.setattr(workspace_module, "LINK_SCAN_MAX_ENTRIES", 3)
    os.link(ws / "src" / "app.py", ws / "src" / "copy.py")
    out = call("file_read", path="src/copy.py")
    assert out.is_error and "too large (over 3 entries)" in out.content
    assert call("file_read", path="src/app.py").is_error  # both of its names have a second one
    (ws / "src" / "single.py").write_text("only one name\n")
    assert call("file_read", path="src/single.py").content == "1\tonly one name"
