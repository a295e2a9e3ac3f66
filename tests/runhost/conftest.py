"""The two-process cluster (tests/cluster.py) for the tests of runs that cross processes; a module
that needs other settings defines its own ``_cluster``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import Cluster, alive, started_cluster


@pytest.fixture(scope="module")
def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two server processes for the module (starting them is the slow part)."""
    yield from started_cluster(tmp_path_factory, "cluster")


@pytest.fixture
def cluster(_cluster: Cluster, redis_url: str) -> Iterator[Cluster]:
    """The module's processes alive, with an empty workspace and a fresh script."""
    yield alive(_cluster)
    _cluster.a.env.pop("APPROVAL_TIMEOUT_SECONDS", None)
