"""Reading /metrics as a scraper does, for the tests that count."""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(server: Any) -> Samples:
    """Every sample /metrics serves now, by name and labels."""
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer test-token"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much the sample ``name`` with exactly ``labels`` grew between two readings."""
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)
