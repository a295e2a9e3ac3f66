"""Start-up says how bash runs (or that it is not offered) and warns when the workspace holds the
data dir (issue #11, items 1 and 2)."""

from __future__ import annotations

from pathlib import Path

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
    assert f"the workspace {workspace} contains the data dir {data_dir}" in log
