"""Start-up says how bash and stdio MCP servers run (or that they cannot) and warns when the workspace holds the
data dir (issue #11, items 1 and 2), and what connection cap it serves under (issue #27)."""

from __future__ import annotations

import resource
from pathlib import Path

from project.fdlimit import connections_the_file_limit_allows
from tests.procs import ServerProcess


def test_start_up_reports_bash_and_a_data_dir_inside_the_workspace(tmp_path: Path):
    workspace = tmp_path / "checkout"
    data_dir = workspace / "data"
    data_dir.mkdir(parents=True)
    # No bwrap on this PATH, and AGENT_BASH_SANDBOX left at "on": bash must not be offered.
    server = ServerProcess(data_dir=data_dir, workspace=workspace, env={"PATH": str(tmp_path / "no-bin")})
    server.log = tmp_path / "server.log"
    try:
        server.start()
    finally:
        server.stop()
    log = server.log.read_text()
    assert "bash:           bash is NOT offered: bubblewrap (bwrap) is missing" in log
    assert "MCP:            stdio servers are NOT started: bubblewrap (bwrap) is missing" in log  # issue #46
    assert f"the workspace {workspace} contains the data dir {data_dir}" in log


def test_start_up_reports_the_connection_cap_the_open_file_limit_leaves(tmp_path: Path):
    """The server inherits this process's hard open-file limit (other limits: test_slow_clients.py)."""
    (tmp_path / "ws").mkdir()
    server = ServerProcess(data_dir=tmp_path, workspace=tmp_path / "ws")
    try:
        server.start()
    finally:
        server.stop()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    shown = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
    cap = connections_the_file_limit_allows()
    line = f"  Connections:    cap {cap} (open-file limit {shown}; less 256 for the process's own files), per process"
    assert line in server.log.read_text()
