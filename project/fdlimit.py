"""The open-file limit, raised at start-up so that thousands of SSE streams fit.

Each open stream is a socket, and many systems start processes with a soft limit
of 1,024 descriptors although the hard limit allows far more. The server raises
its soft limit to the hard limit (an unprivileged process may) and logs what it
has, so an operator who needs more knows which limit to lift.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_open_file_limit() -> int:
    """Raises RLIMIT_NOFILE's soft limit to its hard limit when it can; logs and returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= target:
        log.info("open file limit: %s (hard limit %s)", soft, hard)
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("open file limit stays at %s: raising it to %s failed (%s)", soft, target, exc)
        return soft
    log.info("open file limit raised from %s to %s (the hard limit), for that many open streams", soft, target)
    return target
