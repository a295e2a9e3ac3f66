"""The rules the layers keep, each checked on the imports of every module.

- agents/ knows nothing of HTTP, AG-UI, the run host or persistence;
- threads/ reaches neither the run host nor agui/ (it may use vocabulary/);
- runhost/ is protocol-neutral: it does not reach agui/;
- vocabulary/ is the bottom floor: no Django, nothing of the project;
- the AG-UI event type names are spelled in vocabulary/agui.py only;
- no test imports another test file, and bench/ imports no test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import agents

ROOT = Path(agents.__file__).parent.parent

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
        ("threads", ("runhost", "agui")),
        ("runhost", ("agui",)),
        ("vocabulary", ("django", "agents", "agui", "runhost", "threads", "project")),
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
        for package in ("agents", "agui", "threads", "runhost", "project", "vocabulary")
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
