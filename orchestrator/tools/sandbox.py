"""The bubblewrap sandbox bash runs in (issues #11 and #23), and stdio MCP servers too (#46: one
mechanism; such a server has no workspace unless its entry asks, and is shown the paths its entry
names, ``shown`` read-only and ``writable`` read-write, at their own paths).

What the command sees: the system's own directories read-only (``/usr``, ``/etc``, ``/opt`` and the
``/bin``, ``/lib`` links), a fresh ``/dev``, a ``/proc`` of its own PID namespace (the server's
processes, and their environment, are out of sight), a private writable ``/tmp``, ``/var/tmp``,
``/dev/shm`` and home (``/tmp/home``), bounded in size and gone when the call ends, and its
workspace read-write at the workspace's own path. Nothing else of the host is there: not the
other workspaces nor the root that holds them, not the shared workspace, not the server's checkout,
data dir or virtual environment (those that lie inside a bound directory, ``/opt`` or ``/usr/local``
say, are covered by empty ones, the run's own workspace bound back in where it lies inside one; or
bound read-only when they lie inside the workspace), not ``/root``, ``/home`` or ``/run``.

No network interface but its own loopback, in every mode (issue #47): with ``egress`` set, a call's
way out is Threadline's proxy (orchestrator/tools/egressproxy.py), whose socket is bound in at
``SANDBOX_SOCKET`` and reached through a forwarder on the sandbox's loopback, which the proxy
variables of the command's environment name.

What the command holds: nothing. Whatever the server runs as, the command never has a capability
and is never root on the host:
- when the server is root, bwrap (privileged) sets up the namespaces and mounts, then ``setpriv``
  becomes the sandbox user (``run_as``, not root) with an empty bounding set, no inheritable or
  ambient capabilities and no_new_privs, before bash starts. As that user, mount, umount,
  ``nsenter``, ``ptrace`` and ``/proc/<pid>/mem`` all fail, and root-owned files are not its to
  write even where a mount would allow it.
- when the server is not root, bwrap runs unprivileged in a user namespace of its own, which gives
  the command no capability outside it, and ``--disable-userns`` stops it from making another.

Bounds: the number of processes (``RLIMIT_NPROC``) and each process's address space
(``RLIMIT_AS``) are set as hard limits before the command runs; without ``CAP_SYS_RESOURCE`` it
cannot raise them. (Run as root, the kernel exempts a process from ``RLIMIT_NPROC``: one more
reason the command never is.) Those bound each process, not their sum; where the host gives the
server a cgroup it may divide, each call also runs in a group of its own (orchestrator/tools/cgroups.py)
whose memory and process count hold for all its processes together (issue #49, item 4). Where it
does not, the worst case is the process cap times the per-process bound, and ``describe`` says so.
``--die-with-parent`` ties bwrap to the server: when the server dies, even by SIGKILL, the kernel
kills bwrap, and with it every process of the namespace."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.tools.cgroups import CgroupParents
from orchestrator.tools.egress import EgressPolicy
from orchestrator.tools.egressproxy import FORWARDER, PROXY_PORT, SANDBOX_SOCKET

# The host's directories the command may read: programs, their libraries and the system's settings.
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@functools.cache
def system_mounts() -> tuple[str, ...]:
    """bwrap's arguments for the system's directories, read once: each as it is on this host, a
    read-only bind or, where merged /usr made it one, a link."""
    argv: list[str] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            argv += ["--ro-bind", name, name]
    return tuple(argv)


# Past RLIMIT_FSIZE the kernel sends SIGXFSZ, which kills by default (bash too, for an ``echo >``);
# ignored (and an ignored signal stays ignored across exec), the write fails with EFBIG instead and
# the command goes on, told "File too large".
IGNORE_FILE_SIZE_SIGNAL = "trap '' XFSZ"


def file_size_blocks(file_bytes: int) -> int:
    """``file_bytes`` in the 1024-byte blocks of bash's ``ulimit -f``, rounded down (0 forbids
    writing any byte to a file)."""
    return max(0, file_bytes) // 1024


# The system's Python runs the forwarder to the call's proxy (egressproxy.FORWARDER).
FORWARDER_PYTHON = "/usr/bin/python3"

# The command's scratch space: /tmp, /var/tmp and /dev/shm are each a tmpfs of the call's own, made
# world-writable (sticky) so the sandbox user can write them even when bwrap made them as root
# (issue #49, item 13), and bounded in size; its home is a directory of its own in that /tmp. All of
# it lives in the call's mount namespace and goes with it when the call ends.
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
SCRATCH_HOME = "/tmp/home"


@dataclass(slots=True, frozen=True)
class SandboxBounds:
    max_processes: int = 256
    max_memory_bytes: int = 8 << 30  # per process: address space
    scratch_bytes: int = 512 << 20  # each of SCRATCH_DIRS (memory the kernel holds while the call runs)


@dataclass(slots=True, frozen=True)
class Sandbox:
    bwrap: str  # the bwrap executable
    # Bound read-write, and where the command starts; None: no workspace (a stdio MCP server that
    # asked for none, issue #46), the command starts in ``workdir`` or its scratch /tmp.
    workspace: Path | None
    hidden: tuple[Path, ...] = ()  # directories replaced by empty ones
    # bash's way out: Threadline's proxy, checking each destination (issue #47); None: no network.
    egress: EgressPolicy | None = None
    # The uid (and gid) the command becomes when the server is root, and the setpriv that makes it
    # so; both None when the server is not root (then a user namespace holds the command).
    run_as: int | None = None
    setpriv: str | None = None
    read_only: tuple[Path, ...] = ()  # directories inside the workspace bound read-only over it
    bounds: SandboxBounds = SandboxBounds()
    # Where each call's cgroup is made, bounding the sum of its processes; None: the per-process
    # bounds only, for the reason in ``no_cgroup``.
    cgroups: CgroupParents | None = None
    no_cgroup: str = ""
    # Further paths of the host shown at their own paths, wherever they lie (a stdio MCP server's
    # ``cwd`` and ``paths``): read-only, or read-write. A hidden directory inside one stays hidden.
    shown: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    workdir: Path | None = None  # where the command starts, when not in the workspace

    def for_workspace(self, workspace: Path, hidden: tuple[Path, ...], read_only: tuple[Path, ...]) -> Sandbox:
        """The same sandbox around another workspace."""
        return replace(self, workspace=workspace, hidden=hidden, read_only=read_only)

    def argv(self, command: str, *, file_bytes: int | None = None, egress_socket: str | None = None) -> list[str]:
        """bwrap's command line for ``/bin/bash -c command`` in the workspace; ``file_bytes``: how
        large a file the command may write (``RLIMIT_FSIZE``), None for no bound; with
        ``egress_socket`` (the call's proxy, when ``egress`` is set) bound in and its forwarder
        started first."""
        start = self._prologue(file_bytes)
        if egress_socket is not None:
            start += f' && {FORWARDER_PYTHON} -I -c "$2" {SANDBOX_SOCKET} {PROXY_PORT}'
        argv = [*self._setup(egress_socket), "/bin/bash", "-c", f'{start} && exec /bin/bash -c "$1"', "bash", command]
        return [*argv, FORWARDER] if egress_socket is not None else argv

    def exec_argv(self, program: Sequence[str], *, egress_socket: str | None = None) -> list[str]:
        """bwrap's command line for the program ``program[0]`` with its arguments (looked up in the
        sandbox's ``PATH``), under the same bounds as a command, and with ``egress_socket`` (its
        proxy, when ``egress`` is set) bound in and its forwarder started first, as ``argv``'s."""
        start = self._prologue(None)
        if egress_socket is None:
            return [*self._setup(), "/bin/bash", "-c", f'{start} && exec "$@"', "bash", *program]
        start += f' && {FORWARDER_PYTHON} -I -c "$1" {SANDBOX_SOCKET} {PROXY_PORT} && shift'
        return [*self._setup(egress_socket), "/bin/bash", "-c", f'{start} && exec "$@"', "bash", FORWARDER, *program]

    def _prologue(self, file_bytes: int | None) -> str:
        # The bounds are set by the sandbox's first bash, then the command replaces it: set from
        # inside, RLIMIT_NPROC counts this sandbox's processes (in its user namespace) or the
        # sandbox user's, never the server's own.
        # It also makes the home, so the home is the sandbox user's own.
        bounds = f"ulimit -H -S -u {self.bounds.max_processes} -v {max(1, self.bounds.max_memory_bytes // 1024)}"
        if file_bytes is not None:
            bounds += f" -f {file_size_blocks(file_bytes)} && {IGNORE_FILE_SIZE_SIGNAL}"
        return f"mkdir -p -m 0700 {SCRATCH_HOME} && {bounds}"

    def _setup(self, egress_socket: str | None = None) -> list[str]:
        """bwrap and its options, up to the program it runs."""
        argv = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        argv.append("--unshare-cgroup-try")
        if self.run_as is None:
            argv += ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        argv.append("--unshare-net")
        argv += system_mounts()
        argv += ["--dev", "/dev", "--proc", "/proc"]
        for scratch in SCRATCH_DIRS:
            argv += ["--perms", "01777", "--size", str(self.bounds.scratch_bytes), "--tmpfs", scratch]
        bound: list[tuple[Path, str]] = [(self.workspace, "--bind")] if self.workspace is not None else []
        bound += [(path, "--ro-bind") for path in self.shown] + [(path, "--bind") for path in self.writable]
        bound_paths = {path for path, _ in bound}
        # Mounts apply in order: a parent before what lies inside it (and at one depth, a directory
        # made before a mount over it), so a bound path can sit in a hidden directory (or a hidden
        # one in a bound path) and each ends up as meant.
        mounts: list[tuple[Path, int, list[str]]] = []
        # The directories above each bound path, made in the sandbox's own root (or in an empty
        # hidden one) as plain 0755 ones: bwrap would copy the host's modes, and a 0700 /root would
        # shut the sandbox user out. Nothing else of a hidden directory is there.
        covered = [path for path in self.hidden if path not in bound_paths and self._shown(path)]
        for path, _ in bound:
            for parent in path.parents[:-1]:
                in_covered = any(parent != hidden and parent.is_relative_to(hidden) for hidden in covered)
                if in_covered or not any(parent.is_relative_to(name) for name in SYSTEM_DIRS):
                    mounts.append((parent, 0, ["--perms", "0755", "--dir", str(parent)]))
        mounts += [(path, 1, ["--tmpfs", str(path)]) for path in covered]
        mounts += [(path, 2, [how, str(path), str(path)]) for path, how in bound]
        mounts += [(path, 2, ["--ro-bind", str(path), str(path)]) for path in self.read_only]
        seen: set[tuple[str, ...]] = set()
        for _, _, mount in sorted(mounts, key=lambda item: (len(item[0].parts), item[1])):
            if tuple(mount) not in seen:
                seen.add(tuple(mount))
                argv += mount
        if egress_socket is not None:
            # Its directories made 0755, as above: bwrap would copy the modes of the host's 0700 one.
            for parent in reversed(Path(SANDBOX_SOCKET).parents[:-1]):
                argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--bind", egress_socket, SANDBOX_SOCKET]
        workdir = self.workdir or self.workspace or Path("/tmp")
        argv += ["--chdir", str(workdir)]
        if self.run_as is not None:
            assert self.setpriv is not None
            ids = str(self.run_as)
            argv += [self.setpriv, f"--reuid={ids}", f"--regid={ids}", "--clear-groups", "--bounding-set=-all"]
            argv += ["--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--"]
        return argv

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """The command's environment: ``env`` with a home of its own (the server's is not there)
        and git willing to work in a repository another uid made (the sandbox is its only user)."""
        fixed = {
            "HOME": SCRATCH_HOME,
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": "*",
        }
        if self.egress is not None:
            proxy = f"http://127.0.0.1:{PROXY_PORT}"
            fixed |= {name: proxy for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
            fixed |= {name: f"socks5h://127.0.0.1:{PROXY_PORT}" for name in ("all_proxy", "ALL_PROXY")}
            fixed |= {name: "localhost,127.0.0.1,::1" for name in ("no_proxy", "NO_PROXY")}
        return env | fixed

    def _shown(self, path: Path) -> bool:
        """Whether ``path`` lies in what the sandbox shows of the host; elsewhere it is absent anyway."""
        roots: tuple[str | Path, ...] = (
            *SYSTEM_DIRS,
            *self.shown,
            *self.writable,
            *([self.workspace] if self.workspace else []),
        )
        return any(path.is_relative_to(root) for root in roots)

    def describe(self) -> str:
        who = f"as uid {self.run_as}" if self.run_as is not None else "in a user namespace"
        scratch = f"{self.bounds.scratch_bytes >> 20} MiB"
        network = "no network" if self.egress is None else self.egress.describe()
        return f"{who}, no capabilities, {self.describe_bounds()}, {scratch} each of scratch, {network}"

    def describe_bounds(self) -> str:
        """Which memory bound holds: the sum of a call's processes', or each one's with its worst case."""
        memory, processes = self.bounds.max_memory_bytes, self.bounds.max_processes
        if self.cgroups is not None:
            return (
                f"at most {memory >> 20} MiB of memory and {processes} processes for all of a call's processes "
                f"together ({self.cgroups.describe()})"
            )
        worst = memory * processes
        return (
            f"at most {processes} processes of {memory >> 20} MiB of address space EACH, not in sum: no cgroup "
            f"({self.no_cgroup or 'not asked for'}), so a call may use up to {processes} x {memory >> 20} MiB = "
            f"{worst >> 20} MiB"
        )
