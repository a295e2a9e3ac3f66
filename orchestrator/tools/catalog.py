"""The tool catalogue: every tool the server has, in the order the model is offered them.

A tool added to the server is added here, and only here: the runs offer what this list holds
(agents/runtime.py picks what the settings switch on), and a permission rule may name only what it
holds (``KNOWN_TOOLS``). The client's own tools are not in it: each run adds them as declared.
"""

from __future__ import annotations

from orchestrator.tools.ask import ASK_USER
from orchestrator.tools.base import Tool
from orchestrator.tools.grounding import GROUNDING_REPORT
from orchestrator.tools.mutating import MUTATING_TOOLS
from orchestrator.tools.netaccess import REQUEST_NETWORK_ACCESS
from orchestrator.tools.readonly import READ_ONLY_TOOLS
from orchestrator.tools.subagent import SUB_AGENT
from orchestrator.tools.web import WEB_TOOLS

SERVER_TOOLS: tuple[Tool, ...] = (
    *READ_ONLY_TOOLS,
    *WEB_TOOLS,
    ASK_USER,
    GROUNDING_REPORT,
    SUB_AGENT,
    *MUTATING_TOOLS,
    REQUEST_NETWORK_ACCESS,
)

KNOWN_TOOLS: dict[str, Tool] = {tool.name: tool for tool in SERVER_TOOLS}
