"""The garbage collector's schedule, set for a server that holds thousands of open streams.

Each open SSE stream keeps a few hundred objects alive (the request, its response's
generators, a waiting future), and every object that outlives a few milliseconds is
promoted to the oldest generation, whose collections walk the whole heap: with
10,000 streams open they stopped the event loop for a second or more at a time
(bench/stream.py --streams, gc callbacks). So at start-up the objects of the code
itself (Django, the apps, the SDKs: most of the heap, and never garbage) are frozen
out of the collector's walks, and the young generations are collected less often,
so that short-lived objects die before they are promoted.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

# Allocations before a young collection (CPython's default is 2,000), and how many young
# collections (each) before the next generation's.
THRESHOLDS = (50_000, 20, 20)


def tune_gc() -> None:
    """Freezes what is loaded so far and sets THRESHOLDS; call once, when the application is imported."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    log.debug("gc: %d objects frozen, thresholds %s", gc.get_freeze_count(), THRESHOLDS)
