"""The configuration page's table (docs/configuration.md) is the one description of each setting: every
environment variable project/settings.py reads has its row there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _variables_read(path: Path) -> set[str]:
    """The names of the variables the module reads: the first argument of its env_* helpers and of
    os.environ.get / os.getenv, when it is a literal."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        first = node.args[0]
        value = first.value if isinstance(first, ast.Constant) else None
        reads = called.startswith("env_") or called in ("get", "getenv")
        if reads and isinstance(value, str) and re.fullmatch(r"[A-Z][A-Z0-9_]+", value):
            names.add(value)
    return names


def _documented() -> set[str]:
    """The variables named in the first column of the configuration page's table."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    names: set[str] = set()
    for line in page.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split(" | ", 1)[0]))
    return names


def _settings_read() -> set[str]:
    """What project/settings.py reads, and the tools' settings it star-imports."""
    return _variables_read(ROOT / "project" / "settings.py") | _variables_read(ROOT / "project" / "tool_settings.py")


def test_every_variable_the_settings_read_has_a_row_in_the_configuration_page():
    read = _settings_read()
    assert len(read) > 40  # the reader still finds them
    assert sorted(read - _documented()) == []


def test_every_row_of_the_table_names_a_variable_the_settings_read():
    assert sorted(_documented() - _settings_read()) == []
