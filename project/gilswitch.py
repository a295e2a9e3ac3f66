"""How long a thread keeps the GIL while another waits for it: 1 ms in this server, not 5 ms.

The event log and every run's database work go through one database thread
(threads/dbthread.py). While it runs Python (the ORM work of runs starting and finishing,
the rows of a batch of the log) it holds the GIL, and the event loop, wanting it back, waits:
with a hundred runs starting at once the loop's thread sat in that wait for 10-25% of the
first half second (its wchan, sampled from /proc). At CPython's 5 ms a wait can last 5 ms;
at 1 ms the loop gets the GIL back sooner. Three A/B runs alternating rounds of a 1 ms and a
5 ms server (bench/stream.py --concurrent 100x2000) gave the 1 ms one 4-8% more events/s,
on the SDK and the scripted paths alike.
"""

from __future__ import annotations

import sys

SWITCH_INTERVAL = 0.001  # seconds; CPython's default is 0.005


def tune_switch_interval() -> None:
    """Sets SWITCH_INTERVAL for the whole process; call once, when the application is imported."""
    sys.setswitchinterval(SWITCH_INTERVAL)
