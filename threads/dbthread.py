"""Database work of requests and runs, on one long-lived thread with a persistent connection.

Django gives each request a fresh thread for its sync work, so every request
would open a new database connection (0.4 ms on SQLite, more over a network)
before its first byte. The AG-UI path instead runs its ORM calls on asgiref's
process-wide thread, the one runs already use, whose connection stays open.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

T = TypeVar("T")


def _checked[T](func: Callable[..., T], kwargs: dict[str, Any]) -> T:
    # What Django's close_old_connections does per request: drop a connection
    # that failed, so a database restart costs one error, not every request after it.
    if connection.connection is not None and connection.errors_occurred:
        if not connection.is_usable():
            connection.close()
        connection.errors_occurred = False
    return func(**kwargs)


async def on_db_thread[T](func: Callable[..., T], /, **kwargs: Any) -> T:
    """Runs ``func(**kwargs)`` on the shared database thread and returns its result."""
    call = sync_to_async(_checked, thread_sensitive=True)
    # An empty context, so asgiref picks its process-wide thread rather than
    # the request's own thread-sensitive executor.
    return await asyncio.get_running_loop().create_task(call(func, kwargs), context=contextvars.Context())
