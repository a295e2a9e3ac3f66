"""agents/ knows nothing of HTTP or AG-UI (DESIGN.md §1): its modules import neither."""

from __future__ import annotations

import ast
from pathlib import Path

import agents

_FORBIDDEN = ("django.http", "django.urls", "django.template", "django.contrib.admin", "agui", "runhost", "threads")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_agents_imports_nothing_of_http_or_the_surfaces():
    root = Path(agents.__file__).parent
    offending = {
        f"{path.relative_to(root.parent)}: {name}"
        for path in root.rglob("*.py")
        for name in _imports(path)
        if any(name == banned or name.startswith(banned + ".") for banned in _FORBIDDEN)
    }
    assert not offending, sorted(offending)


def test_agents_modules_import_no_cycle_through_models_or_loop():
    # models.py once imported permissions lazily (permissions imports models); subagents imported loop
    # under TYPE_CHECKING (loop imports subagents). Neither may come back, at any depth of the function.
    root = Path(agents.__file__).parent
    assert "agents.permissions" not in _imports(root / "models.py")
    assert "agents.loop" not in _imports(root / "subagents.py")
