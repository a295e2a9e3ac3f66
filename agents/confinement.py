"""How the tools are confined, from the settings: the server's own files no tool may touch, its code
no tool may change, and the sandbox bash runs in (issues #11 and #23), which stdio MCP servers run in
too (agents/mcp/sandboxing.py, issue #46)."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from orchestrator.tools import cgroups
from orchestrator.tools.egress import EgressBounds, EgressPolicy
from orchestrator.tools.pathguard import PathRules
from orchestrator.tools.protected import Protected
from orchestrator.tools.sandbox import FORWARDER_PYTHON, SYSTEM_DIRS, Sandbox, SandboxBounds
from orchestrator.tools.workspace import Workspace


def _settings_key() -> tuple[object, ...]:
    """What the confinement is computed from: every run asks, and the answer is kept until one of
    these changes (tests override settings; a server's stay put)."""
    database = settings.DATABASES["default"]
    return (
        str(settings.BASE_DIR),
        str(settings.DATA_DIR),
        str(settings.AGENT_WORKSPACE),
        str(settings.AGENT_WORKSPACES_ROOT),
        settings.AGENT_BASH_SANDBOX,
        settings.AGENT_BASH_NETWORK,
        settings.AGENT_BASH_ALLOWED_HOSTS,
        settings.AGENT_BASH_DENIED_HOSTS,
        settings.AGENT_BASH_ALLOWED_PRIVATE_HOSTS,
        settings.AGENT_BASH_NETWORK_HEADERS,
        settings.AGENT_BASH_NETWORK_MAX_CONNECTIONS,
        settings.AGENT_BASH_NETWORK_MAX_BYTES,
        settings.AGENT_BASH_NETWORK_CONNECT_TIMEOUT_SECONDS,
        settings.AGENT_BASH_NETWORK_IDLE_TIMEOUT_SECONDS,
        settings.AGENT_SANDBOX_UID,
        settings.AGENT_BASH_MAX_PROCESSES,
        settings.AGENT_BASH_MAX_MEMORY_BYTES,
        settings.AGENT_BASH_SCRATCH_BYTES,
        settings.AGENT_BASH_CGROUP,
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


def server_code() -> tuple[Path, ...]:
    """The server's code: its checkout and the virtual environment (with its installed packages) it
    runs from. No tool may change them, wherever the workspace is (issue #23, item 2)."""
    paths = [Path(settings.BASE_DIR), Path(settings.BASE_DIR) / ".venv"]
    if sys.prefix != sys.base_prefix:
        paths.append(Path(sys.prefix))
    return tuple(dict.fromkeys(path.resolve() for path in paths if path.is_dir()))


def hidden_roots() -> tuple[tuple[str, Path], ...]:
    """The directories no run's sandbox may show, by the setting that names each: the data dir, the
    root of the users' and threads' workspaces and the shared workspace. A run's own workspace,
    which may lie inside one of them, is bound back in over the empty directory (issue #49, item 1)."""
    return (
        ("THREADLINE_DATA_DIR", Path(settings.DATA_DIR).resolve()),
        ("AGENT_WORKSPACES_ROOT", Path(settings.AGENT_WORKSPACES_ROOT).resolve()),
        ("AGENT_WORKSPACE", Path(settings.AGENT_WORKSPACE).resolve()),
    )


def sandbox_mounts(workspace: Path) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """What the sandbox around ``workspace`` covers with empty directories (the data dir, the
    workspaces root, the shared workspace and the server's code, wherever they lie: inside a system
    directory the sandbox shows too), and what it binds read-only over the workspace (the server's
    code where it lies inside it)."""
    hidden = [path for _, path in hidden_roots()]
    read_only: list[Path] = []
    for path in server_code():
        if path.is_relative_to(workspace):
            read_only.append(path)
        else:
            hidden.append(path)
    # The virtual environment inside a read-only checkout is still hidden (it holds nothing to read).
    hidden += [path for path in server_code()[1:] if path.is_relative_to(workspace)]
    # A directory that holds the workspace is hidden all the same: the sandbox covers it, then binds
    # the workspace back in (mounts apply from the outermost in), so its siblings stay out of sight.
    kept = [path for path in dict.fromkeys(hidden) if path.is_dir() and path != workspace]
    # A directory inside another hidden one is hidden with it.
    hidden_paths = tuple(p for p in kept if not any(p != other and p.is_relative_to(other) for other in kept))
    return hidden_paths, tuple(path for path in read_only if path not in hidden_paths)


def _needed_by_the_sandbox() -> tuple[Path, ...]:
    """What a command in the sandbox cannot run without: the system's programs and libraries, and
    the programs it starts with (bash, and setpriv when the server is root)."""
    needed = [Path(name).resolve() for name in SYSTEM_DIRS if name != "/opt" and Path(name).exists()]
    search_path = os.environ.get("PATH", os.defpath)
    for program in ("bash", "setpriv"):
        found = shutil.which(program, path=search_path)
        if found is not None:
            needed.append(Path(found).resolve().parent)
    needed.append(Path("/bin/bash").resolve().parent)
    return tuple(dict.fromkeys(needed))


def unhideable_layout() -> str | None:
    """None when the sandbox can hide every directory of ``hidden_roots`` (an empty one over it does
    not take away what a command needs to run); else which setting names one it cannot, and why."""
    needed = _needed_by_the_sandbox()
    for name, path in hidden_roots():
        covered = [str(other) for other in needed if other.is_relative_to(path)]
        if path == Path("/") or path == Path("/etc") or covered:
            what = ", ".join(covered) if covered else str(path)
            return (
                f"{name}={str(path)!r} cannot be hidden from bash's sandbox: hiding it would take away {what}, "
                "which the sandbox needs; put it in a directory of its own (such as /srv/threadline or /opt/threadline)"
            )
    return None


@dataclass(slots=True, frozen=True)
class BashChoice:
    offered: bool
    sandbox: Sandbox | None  # the sandbox's settings, around AGENT_WORKSPACE (``sandbox_for`` moves it)
    note: str  # one line for start-up


def bash_choice() -> BashChoice:
    """Whether bash is offered, and how it runs: in bubblewrap, or without it when
    ``AGENT_BASH_SANDBOX=off`` says so; never silently without it, and never in a sandbox whose
    command would hold a capability (checked by running one, not only by finding bwrap)."""
    return _bash_choice(_settings_key())


@functools.lru_cache(maxsize=8)
def _bash_choice(key: tuple[object, ...]) -> BashChoice:
    if settings.AGENT_BASH_SANDBOX == "off":
        return BashChoice(True, None, "bash runs WITHOUT a sandbox (AGENT_BASH_SANDBOX=off)")
    # bash never shares the host's network: its way out is Threadline's proxy (egress, issue #47).
    sandbox = confined_sandbox()
    if isinstance(sandbox, str):
        return _not_offered(sandbox)
    egress = egress_policy()
    if egress is not None and not os.access(FORWARDER_PYTHON, os.X_OK):
        return _not_offered(
            f"AGENT_BASH_NETWORK={settings.AGENT_BASH_NETWORK} needs {FORWARDER_PYTHON} in the sandbox to reach "
            "Threadline's proxy, and it is missing; install python3 or set AGENT_BASH_NETWORK=off"
        )
    sandbox = dataclasses.replace(sandbox, egress=egress)
    return BashChoice(True, sandbox, f"bash runs in a bubblewrap sandbox ({sandbox.bwrap}, {sandbox.describe()})")


def confined_sandbox() -> Sandbox | str:
    """The sandbox of the settings, around AGENT_WORKSPACE, with no network interface (a proxy is the
    way out), once a command in it was seen to hold no capability; else why there can be none. bash
    runs in it, and so does a stdio MCP server (agents/mcp/sandboxing.py, issue #46): one mechanism."""
    return _confined_sandbox(_settings_key())


@functools.lru_cache(maxsize=8)
def _confined_sandbox(key: tuple[object, ...]) -> Sandbox | str:
    layout = unhideable_layout()
    if layout is not None:
        return layout
    search_path = os.environ.get("PATH", os.defpath)
    bwrap = shutil.which("bwrap", path=search_path)
    if bwrap is None:
        return "bubblewrap (bwrap) is missing; install Debian's bubblewrap"
    run_as = setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv", path=search_path)
        if setpriv is None:
            return "the server runs as root and setpriv (util-linux) is missing to drop to a plain user"
        run_as = int(settings.AGENT_SANDBOX_UID)
    bounds = SandboxBounds(
        settings.AGENT_BASH_MAX_PROCESSES, settings.AGENT_BASH_MAX_MEMORY_BYTES, settings.AGENT_BASH_SCRATCH_BYTES
    )
    workspace = Path(settings.AGENT_WORKSPACE).resolve()
    sandbox = Sandbox(bwrap, workspace, run_as=run_as, setpriv=setpriv, bounds=bounds)
    failure = probe_sandbox(sandbox)
    if failure is not None:
        return failure
    parents = _call_cgroups(bounds)
    if isinstance(parents, str) and settings.AGENT_BASH_CGROUP == "require":
        return f"AGENT_BASH_CGROUP=require and no cgroup can bound a call's processes together: {parents}"
    if isinstance(parents, str):
        return dataclasses.replace(sandbox, no_cgroup=parents)
    return dataclasses.replace(sandbox, cgroups=parents)


def _call_cgroups(bounds: SandboxBounds) -> cgroups.CgroupParents | str:
    """Where each call's cgroup is made (checked by starting a process in one), or why there is none."""
    if settings.AGENT_BASH_CGROUP == "off":
        return "AGENT_BASH_CGROUP=off"
    parents = cgroups.find_parents()
    if isinstance(parents, str):
        return parents
    cgroups.remove_leftovers(parents)
    failure = cgroups.probe(parents, memory=bounds.max_memory_bytes, processes=bounds.max_processes)
    return parents if failure is None else failure


def egress_policy() -> EgressPolicy | None:
    """Where bash's proxy lets a command go, from the settings; None when bash has no network."""
    mode = settings.AGENT_BASH_NETWORK
    if mode == "off":
        return None
    bounds = EgressBounds(
        max_connections=settings.AGENT_BASH_NETWORK_MAX_CONNECTIONS,
        max_bytes=settings.AGENT_BASH_NETWORK_MAX_BYTES,
        connect_timeout_seconds=settings.AGENT_BASH_NETWORK_CONNECT_TIMEOUT_SECONDS,
        idle_timeout_seconds=settings.AGENT_BASH_NETWORK_IDLE_TIMEOUT_SECONDS,
    )
    return EgressPolicy(
        mode="on" if mode == "on" else "allowlist",
        allowed=tuple(settings.AGENT_BASH_ALLOWED_HOSTS),
        denied=tuple(settings.AGENT_BASH_DENIED_HOSTS),
        allowed_private_hosts=frozenset(settings.AGENT_BASH_ALLOWED_PRIVATE_HOSTS),
        bounds=bounds,
        headers=tuple(settings.AGENT_BASH_NETWORK_HEADERS),
    )


def server_egress_policy() -> EgressPolicy:
    """Where a stdio MCP server with network goes (issue #46): every public host, through bash's proxy
    and its address checks, less AGENT_BASH_DENIED_HOSTS, and private addresses only as
    AGENT_BASH_ALLOWED_PRIVATE_HOSTS lets them. A server lives for hours: its bounds are on the
    connections open at once (AGENT_BASH_NETWORK_MAX_CONNECTIONS), not on a total, and a connection
    idle for an hour is closed."""
    bounds = EgressBounds(
        max_connections=settings.AGENT_BASH_NETWORK_MAX_CONNECTIONS,
        max_bytes=1 << 62,
        connect_timeout_seconds=settings.AGENT_BASH_NETWORK_CONNECT_TIMEOUT_SECONDS,
        idle_timeout_seconds=3600.0,
    )
    return EgressPolicy(
        mode="on",
        denied=tuple(settings.AGENT_BASH_DENIED_HOSTS),
        allowed_private_hosts=frozenset(settings.AGENT_BASH_ALLOWED_PRIVATE_HOSTS),
        bounds=bounds,
    )


def _not_offered(why: str) -> BashChoice:
    return BashChoice(
        False, None, f"bash is NOT offered: {why}; or set AGENT_BASH_SANDBOX=off to run bash without a sandbox"
    )


# Run in the sandbox at start-up: what the command holds, and who it is on the host.
_PROBE = "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; echo uid=$(id -u)"


def probe_sandbox(sandbox: Sandbox) -> str | None:
    """None when a command in ``sandbox`` runs and holds no capability, and is not root on the host
    unless a user namespace of its own holds it; else why not."""
    with tempfile.TemporaryDirectory(prefix="threadline-probe-") as scratch:
        probe = sandbox.for_workspace(Path(scratch), (), ())
        if probe.run_as is not None:
            os.chown(scratch, probe.run_as, probe.run_as)
        try:
            done = subprocess.run(probe.argv(_PROBE), capture_output=True, timeout=20, check=False, env={})
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap could not be started ({exc})"
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot set up a sandbox here ({err[-1] if err else done.returncode})"
    capabilities = dict(line.split(":\t", 1) for line in out.splitlines() if line.startswith("Cap"))
    held = {name: value for name, value in capabilities.items() if int(value, 16) != 0}
    if len(capabilities) != 5 or held:
        return f"a command in the sandbox still holds capabilities ({held or 'unknown'})"
    if sandbox.run_as is not None and f"uid={sandbox.run_as}" not in out:
        return f"a command in the sandbox did not run as uid {sandbox.run_as}"
    return None


def sandbox_for(workspace: Path) -> Sandbox | None:
    """bash's sandbox around ``workspace``: that workspace only, read-write."""
    sandbox = bash_choice().sandbox
    if sandbox is None:
        return None
    root = workspace.resolve()
    hidden, read_only = sandbox_mounts(root)
    return sandbox.for_workspace(root, hidden, read_only)


def server_workspace(rules: PathRules | None = None, root: Path | None = None) -> Workspace:
    """The workspace at ``root`` (by default ``AGENT_WORKSPACE``) with the server's files protected,
    its code read-only, and bash's sandbox around it."""
    path = Path(settings.AGENT_WORKSPACE if root is None else root).resolve()
    return Workspace(
        path,
        protected=server_protected(),
        read_only=server_code(),
        rules=rules,
        sandbox=sandbox_for(path),
        max_bytes=settings.AGENT_WORKSPACE_MAX_BYTES,
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
    code = [path for path in server_code() if path.is_relative_to(workspace) or workspace.is_relative_to(path)]
    if code:
        notes.append(
            f"the workspace {workspace} contains the server's code ({', '.join(map(str, code))}); no tool may "
            "change it, but give the agent a workspace of its own (AGENT_WORKSPACE)"
        )
    if settings.AGENT_WORKSPACE_MODE == "shared":
        notes.append(
            "AGENT_WORKSPACE_MODE=shared: every user's agent works in one directory; users are NOT isolated "
            "from each other's files"
        )
    return notes
