"""The rules the layers keep, each checked on the imports of every module.

- orchestrator/ (the run core) knows no Django and nothing of the project's apps: it imports in a
  process where Django was never set up, and pulls no Django module in;
- agents/ (the Django app) reaches neither the run host, agui/, threads/ nor project/;
- threads/ reaches neither the run host, agui/ nor project/ (it may use vocabulary/);
- runhost/ is protocol-neutral: it reaches neither agui/ nor project/;
- agui/ does not reach project/;
- vocabulary/ is the bottom floor: no Django, nothing of the project;
- the AG-UI event type names are spelled in vocabulary/agui.py only;
- no test imports another test file, and bench/ imports no test.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_run_core_imports_without_django():
    """Not only by its import lines: in a process with no settings, importing every module of
    orchestrator/ leaves Django out of sys.modules."""
    script = (
        "import pkgutil, importlib, sys, orchestrator\n"
        "for module in pkgutil.walk_packages(orchestrator.__path__, 'orchestrator.'):\n"
        "    importlib.import_module(module.name)\n"
        "print(sorted(name for name in sys.modules if name == 'django' or name.startswith('django.')))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_agents_modules_import_no_cycle_through_models_or_loop():
    # models.py once imported permissions lazily (permissions imports models); subagents imported loop
    # under TYPE_CHECKING (loop imports subagents). Neither may come back, at any depth of the function.
    assert "agents.permissions" not in _imports(ROOT / "agents" / "models.py")
    assert "orchestrator.loop" not in _imports(ROOT / "orchestrator" / "subagents.py")


def _offending(package: str, banned: tuple[str, ...]) -> list[str]:
    root = ROOT / package
    return sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in root.rglob("*.py")
        for name in _imports(path)
        if any(name == prefix or name.startswith(prefix + ".") for prefix in banned)
    )


@pytest.mark.parametrize(
    ("package", "banned"),
    [
        (
            "orchestrator",
            ("django", "rest_framework", "channels", "agents", "threads", "runhost", "agui", "project", "vocabulary"),
        ),
        ("agents", ("runhost", "agui", "threads", "project")),
        ("threads", ("runhost", "agui", "project")),
        ("runhost", ("agui", "project")),
        ("agui", ("project",)),
        ("vocabulary", ("django", "orchestrator", "agents", "agui", "runhost", "threads", "project")),
    ],
)
def test_a_layer_reaches_nothing_above_it(package, banned):
    assert _offending(package, banned) == []


_EVENT_NAME = re.compile(
    r"""["'](RUN_(STARTED|FINISHED|ERROR)|STATE_(SNAPSHOT|DELTA)|MESSAGES_SNAPSHOT|TEXT_MESSAGE_[A-Z]+"""
    r"""|TOOL_CALL_[A-Z]+|REASONING_[A-Z_]+|STEP_(STARTED|FINISHED)|CUSTOM|SUBAGENT_[A-Z]+)["']"""
)


def test_the_agui_event_type_names_are_spelled_in_one_module():
    spelled = sorted(
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for package in ("orchestrator", "agents", "agui", "threads", "runhost", "project", "vocabulary")
        for path in (ROOT / package).rglob("*.py")
        if path != ROOT / "vocabulary" / "agui.py"
        for match in _EVENT_NAME.finditer(path.read_text())
    )
    assert spelled == []


def test_no_test_imports_a_test_file_and_bench_imports_no_test():
    importers = [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    offending = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in importers
        for name in _imports(path)
        if re.match(r"tests(\.[a-z_]+)*\.test_", name)
    )
    assert offending == []
