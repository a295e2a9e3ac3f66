"""The bubblewrap sandbox bash runs in (issue #11, item 2).

The command gets a PID namespace of its own (the server's processes, and their environment in
/proc, are out of sight), the workspace read-write, the rest of the system read-only, the
server's data dir and checkout (or, when the checkout is the workspace, its data dir and virtual
environment) replaced by empty directories, /run (where local sockets such as PostgreSQL's live)
emptied, and no network unless asked for. ``--die-with-parent`` ties bwrap to the server: when the
server dies, even by SIGKILL, the kernel kills bwrap, and with it every process of the namespace."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(slots=True, frozen=True)
class Sandbox:
    bwrap: str  # the bwrap executable
    workspace: Path
    hidden: tuple[Path, ...] = ()  # directories replaced by empty ones
    network: bool = False

    def argv(self, command: str) -> list[str]:
        """bwrap's command line for ``/bin/bash -c command`` in the workspace."""
        argv = [self.bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if not self.network:
            argv.append("--unshare-net")
        argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run"]
        # Mounts apply in order: a parent before what lies inside it, so the workspace can sit in a
        # hidden directory (or a hidden one in the workspace) and each ends up as meant.
        mounts = [(self.workspace, ["--bind", str(self.workspace), str(self.workspace)])]
        mounts += [(path, ["--tmpfs", str(path)]) for path in self.hidden if path != self.workspace]
        for _, mount in sorted(mounts, key=lambda item: len(item[0].parts)):
            argv += mount
        argv += ["--chdir", str(self.workspace), "/bin/bash", "-c", command]
        return argv
