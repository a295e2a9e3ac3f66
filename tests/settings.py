"""Settings for the test suite: the project's settings with a throwaway data dir and no real key."""

import atexit
import os
import shutil
import tempfile

_DATA = tempfile.mkdtemp(prefix="threadline-test-")
atexit.register(shutil.rmtree, _DATA, ignore_errors=True)  # each run's throwaway data dir goes with it
os.environ["THREADLINE_DATA_DIR"] = _DATA
# Where runs work: outside the data dir and the checkout, thrown away with the run.
_WORK = tempfile.mkdtemp(prefix="threadline-test-work-")
atexit.register(shutil.rmtree, _WORK, ignore_errors=True)
os.makedirs(os.path.join(_WORK, "workspace"))
os.environ["AGENT_WORKSPACE"] = os.path.join(_WORK, "workspace")
os.environ["AGENT_WORKSPACES_ROOT"] = os.path.join(_WORK, "workspaces")
os.environ["AGUI_TOKEN"] = "test-token"
# Tests never talk to the real API: a key in the developer's environment is ignored.
os.environ["ANTHROPIC_API_KEY"] = ""
os.environ.pop("ANTHROPIC_BASE_URL", None)
os.environ.pop("DATABASE_URL", None)
os.environ.pop("REDIS_URL", None)
# No MCP servers unless a test configures some (a .mcp.json in the checkout is not the suite's).
os.environ["MCP_SERVERS"] = "off"
# bash runs in bubblewrap, and so do stdio MCP servers; where it is missing (a laptop; .ci/run installs
# it) the suite's runs use both without it, and tests/agents/test_tools_sandbox.py skips, saying so.
if shutil.which("bwrap") is None:
    os.environ["AGENT_BASH_SANDBOX"] = "off"
    os.environ["MCP_SANDBOX"] = "off"  # so do stdio MCP servers; tests/agents/test_mcp_sandbox.py skips

from project.settings import *
from project.settings import DATABASES

DATABASES["default"]["TEST"] = {"NAME": os.path.join(_DATA, "test.sqlite3")}
EVENT_LOG_FLUSH_SECONDS = 0.005
DEMO_MODEL_DELAY_SECONDS = 0.0
MODEL_RETRY_BACKOFF_SECONDS = 0.01
ANTHROPIC_MAX_RETRIES = 0
WAIT_SWEEP_SECONDS = 0.1
