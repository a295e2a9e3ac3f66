"""The open-file limit, raised at start-up so that thousands of SSE streams fit.

Each open stream is a socket, and many systems start processes with a soft limit
of 1,024 descriptors although the hard limit allows far more. The server raises
its soft limit to the hard limit (an unprivileged process may) and logs what it
has, so an operator who needs more knows which limit to lift. The default connection
cap (SERVER_MAX_CONNECTIONS) is what that limit leaves for client connections.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)

# Descriptors the process needs besides its client connections: database and Redis connections,
# the workspace's files, bash's pipes, the log.
FILES_BESIDES_CONNECTIONS = 256
MAX_CONNECTIONS = 1_000_000


def connections_the_file_limit_allows() -> int:
    """The connections the hard open-file limit leaves room for (the soft limit is raised to it at
    start-up), besides what the process needs: between 1 and MAX_CONNECTIONS."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, hard - FILES_BESIDES_CONNECTIONS))


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
