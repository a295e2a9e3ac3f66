"""How the tools are confined, from the settings: the server's own files no tool may touch, and
the sandbox bash runs in (issue #11, items 1 and 2)."""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from agents.tools.sandbox import Sandbox
from agents.tools.workspace import PathRules, Protected, Workspace


def _settings_key() -> tuple[object, ...]:
    """What the confinement is computed from: every run asks, and the answer is kept until one of
    these changes (tests override settings; a server's stay put)."""
    database = settings.DATABASES["default"]
    return (
        str(settings.BASE_DIR),
        str(settings.DATA_DIR),
        str(settings.AGENT_WORKSPACE),
        settings.AGENT_BASH_SANDBOX,
        settings.AGENT_BASH_NETWORK,
        database["ENGINE"],
        str(database["NAME"]),
        os.environ.get("PATH", os.defpath),
        sys.prefix,
    )


@functools.lru_cache(maxsize=8)
def _protected_paths(key: tuple[object, ...]) -> tuple[Path, ...]:
    """The data dir (database, generated token and secret key), the SQLite database wherever it
    is, and the virtual environments the server runs from."""
    base = Path(settings.BASE_DIR)
    paths = [Path(settings.DATA_DIR), base / ".venv"]
    if sys.prefix != sys.base_prefix:
        paths.append(Path(sys.prefix))
    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3" and str(database["NAME"]) != ":memory:":
        paths.append(Path(database["NAME"]))
    return tuple(path.resolve() for path in paths)


_protected: tuple[tuple[object, ...], Protected] | None = None


def server_protected() -> Protected:
    """The identities of the server's own files, read again only when one of the protected
    directories changed (a file added, removed or renamed there changes its mtime), so a run
    pays a stat per path rather than a scan of the data dir."""
    global _protected
    paths = _protected_paths(_settings_key())
    stamp = (paths, tuple(_stamp(path) for path in paths))
    if _protected is None or _protected[0] != stamp:
        _protected = (stamp, Protected.of(paths))
    return _protected[1]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """A file by its identity; a directory by its identity and mtime, which its entries move."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns if stat.S_ISDIR(info.st_mode) else 0)


def hidden_from_bash() -> tuple[Path, ...]:
    """What the sandbox replaces by an empty directory: the data dir and the server's checkout, or,
    when the checkout is the workspace, the data dir and the virtual environment."""
    base = Path(settings.BASE_DIR).resolve()
    workspace = Path(settings.AGENT_WORKSPACE).resolve()
    hidden = [Path(settings.DATA_DIR).resolve()]
    hidden += [base / ".venv"] if base == workspace else [base]
    if sys.prefix != sys.base_prefix:
        hidden.append(Path(sys.prefix).resolve())
    kept = [path for path in dict.fromkeys(hidden) if path.is_dir()]
    # A directory inside another hidden one is hidden with it.
    return tuple(path for path in kept if not any(path != other and path.is_relative_to(other) for other in kept))


@dataclass(slots=True, frozen=True)
class BashChoice:
    offered: bool
    sandbox: Sandbox | None
    note: str  # one line for start-up


def bash_choice() -> BashChoice:
    """Whether bash is offered, and how it runs: in bubblewrap, or without it when
    ``AGENT_BASH_SANDBOX=off`` says so; never silently without it."""
    return _bash_choice(_settings_key())


@functools.lru_cache(maxsize=8)
def _bash_choice(key: tuple[object, ...]) -> BashChoice:
    if settings.AGENT_BASH_SANDBOX == "off":
        return BashChoice(True, None, "bash runs WITHOUT a sandbox (AGENT_BASH_SANDBOX=off)")
    bwrap = working_bwrap(os.environ.get("PATH", os.defpath))
    if bwrap is None:
        return BashChoice(
            False,
            None,
            "bash is NOT offered: bubblewrap (bwrap) is missing or cannot create namespaces here; "
            "install Debian's bubblewrap, or set AGENT_BASH_SANDBOX=off to run bash without a sandbox",
        )
    network = settings.AGENT_BASH_NETWORK == "on"
    sandbox = Sandbox(bwrap, Path(settings.AGENT_WORKSPACE).resolve(), hidden_from_bash(), network)
    where = "with network access" if network else "no network"
    return BashChoice(True, sandbox, f"bash runs in a bubblewrap sandbox ({bwrap}, {where})")


@functools.lru_cache(maxsize=8)
def working_bwrap(search_path: str) -> str | None:
    """The bwrap on ``search_path`` if it can set up a sandbox here (containers may forbid namespaces)."""
    bwrap = shutil.which("bwrap", path=search_path)
    if bwrap is None:
        return None
    probe = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc"]
    try:
        done = subprocess.run([*probe, "/bin/true"], capture_output=True, timeout=10, check=False, env={})
    except (OSError, subprocess.TimeoutExpired):
        return None
    return bwrap if done.returncode == 0 else None


def server_workspace(rules: PathRules | None = None) -> Workspace:
    """The workspace of ``AGENT_WORKSPACE`` with the server's files protected and bash's sandbox."""
    return Workspace(
        Path(settings.AGENT_WORKSPACE), protected=server_protected(), rules=rules, sandbox=bash_choice().sandbox
    )


def startup_warnings() -> list[str]:
    """What an operator must hear at start-up about the tools' confinement."""
    notes: list[str] = []
    workspace = Path(settings.AGENT_WORKSPACE).resolve()
    data_dir = Path(settings.DATA_DIR).resolve()
    if data_dir.is_relative_to(workspace):
        notes.append(
            f"the workspace {workspace} contains the data dir {data_dir}; the tools refuse it, but consider "
            "THREADLINE_DATA_DIR outside the workspace"
        )
    return notes
