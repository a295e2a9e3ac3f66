"""A sub-agent's own verdict on its task: success, partial, failed or blocked.

The child is asked to end its final report with a ``Conclusion: <verdict>`` line; the verdict is read
from there. A child that did not finish by itself (a limit, a cancel, a failure) or said nothing
usable gets the verdict its ending implies.
"""

from __future__ import annotations

import re

VERDICTS = ("success", "partial", "failed", "blocked")

# Appended to every sub-agent's system prompt, the parent's own included.
REPORT_INSTRUCTION = (
    "\n\nEnd your last message with a line of its own giving your verdict on the task, exactly one of:\n"
    "Conclusion: success   (the task is done)\n"
    "Conclusion: partial   (some of it is done; say what is left)\n"
    "Conclusion: failed    (you tried and could not do it; say why)\n"
    "Conclusion: blocked   (you cannot go on without something you do not have; say what)"
)

# "Conclusion: partial", "**Verdict** - blocked", "conclusion = success." at the start of a line.
_VERDICT_LINE = re.compile(
    r"^[\s>*_#`-]*(?:conclusion|verdict)[\s*_`]*[:=-]+[\s*_`]*(success|partial|failed|blocked)\b",
    re.IGNORECASE | re.MULTILINE,
)


def parse_verdict(report: str) -> str | None:
    """The verdict the report states on a line of its own (the last such line), or None."""
    found = _VERDICT_LINE.findall(report)
    return found[-1].lower() if found else None


def conclusion_of(status: str, report: str) -> str:
    """The board's ``conclusion`` of a task that ended with ``status`` and final ``report``:
    the child's own verdict when it finished by itself, else what its ending implies
    (stopped by a limit: partial; failed, cancelled or interrupted: failed). "" while it runs."""
    if status == "succeeded":
        return parse_verdict(report) or "success"
    if status == "stopped":
        return "partial"
    if status in ("failed", "cancelled", "interrupted"):
        return "failed"
    return ""
