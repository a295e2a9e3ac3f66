"""PostgreSQL and Redis as the tests reach them: where they are, and what a test does when one is
not there (skips loudly; fails under REQUIRE_SERVICES=1, as CI sets). The fixtures that hand them
out (``postgres_url``, ``redis_url``) are in conftest.py."""

from __future__ import annotations

import os
import warnings

import pytest

PG_ADMIN = "postgresql://127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


def _unavailable(what: str, why: object) -> None:
    message = f"{what} is not reachable ({why}); the multi-process tests did NOT run"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(message + " and REQUIRE_SERVICES=1 makes that a failure")
    warnings.warn(message, pytest.PytestWarning, stacklevel=2)  # shown in the summary, so a skip is never silent
    pytest.skip(message)
