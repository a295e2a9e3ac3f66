"""A control group per bash call, so that its bounds hold for the sum of its processes (issue #49,
item 4): ``RLIMIT_AS`` bounds each process, and eight processes of 400 MiB each ran under a 512 MiB
bound. In a group of its own, the call's processes together may use ``memory`` bytes (what they
hold resident, their scratch tmpfs included: the kernel stops the largest one past it) and be
``processes`` in number.

Where the host gives the server a cgroup it may divide (root, or a delegated one), each call gets a
child of the server's own group: on cgroup v2 one group with the memory and pids controllers; on a
host that still mounts the v1 hierarchies (memory and pids each on its own, as on these machines)
one child in each. The command joins it before bwrap starts (``join_argv``: a shell that writes its
own pid into the group, then becomes bwrap), so every process the sandbox ever makes is counted.
A command in the sandbox cannot leave it: /sys is not there, and the sandbox user could not write
the group's files if it were. When the call ends, whatever is left in the group is killed and the
group removed.

Where no cgroup can be had (not root and nothing delegated, or controllers missing) the caller falls
back on the per-process bounds, whose worst case is the process cap times the per-process bound;
start-up says which applies (``agents/confinement.py``)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# The calls' groups are named so; one left by a server killed mid-call is removed at the next start.
PREFIX = "threadline-bash-"
# cgroup v2: where the server's own processes move when its group must hand its controllers to children
# (a v2 group with processes in it may not: the "no internal processes" rule).
SERVER_LEAF = "threadline-server"
_REMOVE_SECONDS = 2.0


@dataclass(slots=True, frozen=True)
class CgroupParents:
    """Where the calls' groups are made: v2, one directory; v1, the memory and the pids hierarchy's."""

    version: Literal[1, 2]
    memory: Path
    pids: Path

    def describe(self) -> str:
        where = str(self.memory) if self.version == 2 else f"{self.memory} and {self.pids}"
        return f"a cgroup v{self.version} of its own per call, under {where}"


@dataclass(slots=True, frozen=True)
class CallGroup:
    """One call's group (v2: one directory; v1: one in the memory, one in the pids hierarchy)."""

    version: Literal[1, 2]
    dirs: tuple[Path, ...]

    def join_argv(self, argv: list[str]) -> list[str]:
        """``argv`` started in this group: a shell writes its pid to each group's cgroup.procs (the
        children it then has are born there), then becomes ``argv``; exit 125 when it cannot join."""
        script = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        procs = [str(path / "cgroup.procs") for path in self.dirs]
        return ["/bin/sh", "-c", script, "sh", *procs, "--", *argv]

    def memory_kills(self) -> int:
        """How many of the call's processes the kernel killed at the memory bound."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.dirs[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        """Kills whatever is left in the group and removes it; a group that will not go (a process
        stuck in the kernel) is left for the next start to remove."""
        deadline = time.monotonic() + _REMOVE_SECONDS
        for path in self.dirs:
            while True:
                _kill_all(path, self.version)
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    time.sleep(0.002)  # its last processes are still being reaped


def _kill_all(path: Path, version: int) -> None:
    if version == 2:
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
            return
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


# How old an empty call's group must be before a server starting up takes it for a leftover.
LEFTOVER_SECONDS = 60.0


def open_call_group(parents: CgroupParents, *, memory: int, processes: int) -> CallGroup:
    """A new group for one call, bounded to ``memory`` bytes (swap none) and ``processes`` processes."""
    name = PREFIX + uuid.uuid4().hex[:16]
    if parents.version == 2:
        group = CallGroup(2, (parents.memory / name,))
        path = group.dirs[0]
        path.mkdir()
        try:
            (path / "memory.max").write_text(str(memory))
            with contextlib.suppress(OSError):  # absent without swap accounting
                (path / "memory.swap.max").write_text("0")
            (path / "pids.max").write_text(str(processes))
        except BaseException:
            group.remove()
            raise
        return group
    group = CallGroup(1, (parents.memory / name, parents.pids / name))
    for path in group.dirs:
        path.mkdir()
    try:
        memory_dir, pids_dir = group.dirs
        (memory_dir / "memory.limit_in_bytes").write_text(str(memory))
        with contextlib.suppress(OSError):  # memory and swap together; absent without swap accounting
            (memory_dir / "memory.memsw.limit_in_bytes").write_text(str(memory))
        (pids_dir / "pids.max").write_text(str(processes))
    except BaseException:
        group.remove()
        raise
    return group


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(root within the hierarchy, mount point, file system type, super options) of each cgroup mount."""
    found: list[tuple[str, Path, str, set[str]]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields, _, tail = line.partition(" - ")
            parts, extra = fields.split(), tail.split()
            if len(parts) >= 5 and len(extra) >= 3 and extra[0] in ("cgroup", "cgroup2"):
                found.append((parts[3], Path(parts[4]), extra[0], set(extra[2].split(","))))
    return found


def _own_groups() -> dict[str, str]:
    """This process's group in each hierarchy: ``""`` for v2, else the v1 controllers' names."""
    groups: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                groups[name] = path
    return groups


def _directory(mount_root: str, mount_point: Path, group: str) -> Path | None:
    """Where ``group`` of a hierarchy lies under its mount, or None when the mount does not show it."""
    relative = os.path.relpath(group, mount_root)
    if relative.startswith(".."):
        return None
    return (mount_point / relative).resolve() if relative != "." else mount_point


def find_parents() -> CgroupParents | str:
    """Where this server may make its calls' groups, or why it may not."""
    groups = _own_groups()
    mounts = _mounts()
    reasons: list[str] = []
    for root, point, kind, _ in mounts:
        if kind == "cgroup2" and "" in groups:
            where = _directory(root, point, groups[""])
            if where is not None:
                found = _v2_parent(where)
                if isinstance(found, CgroupParents):
                    return found
                reasons.append(found)
    v1: dict[str, Path] = {}
    for controller in ("memory", "pids"):
        for root, point, kind, options in mounts:
            if kind == "cgroup" and controller in options and controller in groups:
                where = _directory(root, point, groups[controller])
                if where is not None:
                    v1[controller] = where
    if len(v1) == 2:
        if all(os.access(path, os.W_OK) for path in v1.values()):
            return CgroupParents(1, v1["memory"], v1["pids"])
        reasons.append(f"the server's v1 memory and pids groups ({v1['memory']}, {v1['pids']}) are not its to write")
    elif not reasons:
        reasons.append("no cgroup v2 with the memory and pids controllers, nor v1 memory and pids hierarchies")
    return "; ".join(reasons)


def _v2_parent(where: Path) -> CgroupParents | str:
    """The server's v2 group, made able to hold the calls' groups with memory and pids bounded."""
    try:
        available = set((where / "cgroup.controllers").read_text().split())
    except OSError as exc:
        return f"cgroup v2 at {where} cannot be read ({exc.strerror})"
    if not {"memory", "pids"} <= available:
        offered = " ".join(sorted(available)) or "none"
        return f"cgroup v2 at {where} does not offer the memory and pids controllers (only: {offered})"
    if not os.access(where, os.W_OK):
        return f"cgroup v2 at {where} is not the server's to write (run as root, or delegate it)"
    if _enable(where):
        return CgroupParents(2, where, where)
    # A group with processes may not hand controllers down: the server moves into a leaf of its own.
    leaf = where / SERVER_LEAF
    try:
        leaf.mkdir(exist_ok=True)
        (leaf / "cgroup.procs").write_text("0")
    except OSError as exc:
        return f"cgroup v2 at {where} holds processes and the server cannot move into {leaf} ({exc.strerror})"
    if _enable(where):
        return CgroupParents(2, where, where)
    with contextlib.suppress(OSError):
        (where / "cgroup.procs").write_text("0")
        leaf.rmdir()
    return f"cgroup v2 at {where} holds processes other than the server's, so it cannot hand memory and pids down"


def _enable(where: Path) -> bool:
    try:
        (where / "cgroup.subtree_control").write_text("+memory +pids")
    except OSError:
        return False
    return True


def remove_leftovers(parents: CgroupParents, *, older_than: float = LEFTOVER_SECONDS) -> None:
    """Removes the calls' groups a server killed mid-call left behind: empty by then (bwrap dies with
    its parent, and its namespace with it). A group with processes is another live server's call
    (workers share their parent's group): rmdir refuses it, and it is left alone. So is a group made
    in the last ``older_than`` seconds: another server's call makes its group empty and only then
    starts the process that joins it, and a group removed in between fails that call."""
    now = time.time()
    for base in dict.fromkeys((parents.memory, parents.pids)):
        with contextlib.suppress(OSError):
            for path in base.iterdir():
                if path.name.startswith(PREFIX):
                    with contextlib.suppress(OSError):
                        if now - path.stat().st_mtime >= older_than:
                            path.rmdir()


def probe(parents: CgroupParents, *, memory: int, processes: int) -> str | None:
    """None when a process started with ``join_argv`` lands in a new group bounded as asked; else why not."""
    try:
        group = open_call_group(parents, memory=memory, processes=processes)
    except OSError as exc:
        return f"a group could not be made under {parents.memory} ({exc.strerror})"
    try:
        done = subprocess.run(
            group.join_argv(["/bin/cat", "/proc/self/cgroup"]), capture_output=True, timeout=10, check=False, env={}
        )
        if done.returncode != 0 or group.dirs[0].name not in done.stdout.decode(errors="replace"):
            return f"a process could not join a group under {parents.memory}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"a process could not join a group under {parents.memory} ({exc})"
    finally:
        group.remove()
    return None
