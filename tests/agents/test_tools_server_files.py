"""The server's own files (data dir, database, secrets, virtual environment) are out of every
tool's reach, whatever the permission rules say (issue #11, item 1)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from django.test import override_settings

from agents.confinement import startup_warnings
from agents.models import PermissionRule
from agents.permissions import evaluate, rules_for
from agents.runtime import tool_context
from orchestrator.tools.base import ToolOutput, ToolRegistry
from orchestrator.tools.catalog import KNOWN_TOOLS
from orchestrator.tools.mutating import APPLY_PATCH, FILE_EDIT, FILE_WRITE
from orchestrator.tools.readonly import READ_ONLY_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "the-generated-agui-token"


@pytest.fixture
def checkout(tmp_path: Path):
    """A workspace laid out as the default one: the checkout, with the data dir and .venv inside."""
    root = tmp_path / "checkout"
    (root / "data").mkdir(parents=True)
    (root / "data" / "agui-token").write_text(TOKEN + "\n")
    (root / "data" / "django-secret-key").write_text("the-secret-key\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "activate").write_text("# activate\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hello')\n")
    os.symlink("../data/agui-token", root / "src" / "token-link")
    os.link(root / "data" / "agui-token", root / "src" / "token-hardlink")
    with override_settings(AGENT_WORKSPACE=root, DATA_DIR=root / "data", BASE_DIR=root):
        yield root
    # A rule that allows everything does not change any of it.


@pytest.fixture
def allow_all(db):
    PermissionRule.objects.create(position=1, tool="", match="**", decision=PermissionRule.Decision.ALLOW)


def call(name: str, **arguments: object) -> ToolOutput:
    registry = ToolRegistry.of((*READ_ONLY_TOOLS, FILE_WRITE, FILE_EDIT, APPLY_PATCH))
    return asyncio.run(registry.call(name, dict(arguments), tool_context(agent_name="coder", thread_id="t1")))


@pytest.mark.parametrize(
    "path",
    ["data/agui-token", "data/django-secret-key", "./data/../data/agui-token", "src/token-link", "src/token-hardlink"],
)
def test_file_read_never_reaches_the_servers_secrets(checkout, allow_all, path):
    out = call("file_read", path=path)
    assert out.is_error and "server's own files" in out.content
    assert TOKEN not in out.content


@pytest.mark.parametrize("path", ["data/agui-token", "data/new-file", ".venv/bin/activate", "src/token-link"])
def test_no_tool_writes_the_servers_files(checkout, allow_all, path):
    before = (checkout / "data" / "agui-token").read_text()
    out = call("file_write", path=path, content="owned\n")
    assert out.is_error and "server's own files" in out.content
    assert (checkout / "data" / "agui-token").read_text() == before
    assert not (checkout / "data" / "new-file").exists()
    assert (checkout / ".venv" / "bin" / "activate").read_text() == "# activate\n"


def test_a_secret_the_server_writes_later_is_out_of_reach_at_the_next_call(checkout, allow_all):
    # What is protected is read once and kept while the protected directories stay as they were; a
    # file added to the data dir changes it, so a hard link to the new file is refused at once.
    assert call("file_read", path="src/app.py").content.endswith("print('hello')")
    (checkout / "data" / "later-secret").write_text("the-later-secret\n")
    os.link(checkout / "data" / "later-secret", checkout / "src" / "later-link")
    out = call("file_read", path="src/later-link")
    assert out.is_error and "server's own files" in out.content and "the-later-secret" not in out.content


def test_apply_patch_cannot_create_a_file_in_the_data_dir(checkout, allow_all):
    out = call("apply_patch", patch="--- /dev/null\n+++ data/evil\n@@ -0,0 +1 @@\n+x\n")
    assert out.is_error and not (checkout / "data" / "evil").exists()


def test_grep_and_glob_skip_the_servers_files(checkout, allow_all):
    grep = call("grep", pattern="the-")
    assert TOKEN not in grep.content and "the-secret-key" not in grep.content
    listed = call("glob", pattern="**/*").content.splitlines()
    assert "src/app.py" in listed
    assert not [line for line in listed if line.startswith(("data", ".venv")) or "token" in line]
    assert call("grep", pattern="x", path="data").is_error


def test_the_permission_check_denies_them_above_every_rule(checkout, allow_all):
    verdict = evaluate(
        rules_for("coder", "t1"),
        tool=KNOWN_TOOLS["file_read"],
        arguments={"path": "src/token-link"},
        remembered=False,
        auto_approve=True,
    )
    assert verdict.decision == PermissionRule.Decision.DENY and verdict.rule_id is None
    assert "built-in" in verdict.reason


def test_start_up_warns_when_the_workspace_contains_the_data_dir(checkout, tmp_path):
    assert any("contains the data dir" in warning for warning in startup_warnings())
    with override_settings(DATA_DIR=tmp_path / "elsewhere"):
        assert not any("data dir" in warning for warning in startup_warnings())
