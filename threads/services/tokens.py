"""The token counters that sessions, runs and sub-agent tasks all keep, added to in the database."""

from __future__ import annotations

from django.db.models import F
from django.db.models.expressions import Combinable

from orchestrator.providers.base import TokenCount


def tokens_added(usage: TokenCount) -> dict[str, Combinable]:
    """The ``update()`` keywords that add ``usage`` to a row's counters in the database
    (``F()`` expressions, so two writers adding at once both count)."""
    return {name: F(name) + count for name, count in token_counts(usage).items()}


def token_counts(usage: TokenCount) -> dict[str, int]:
    """The counters by field name, as plain numbers (``fastsql.update_statement(adding=...)`` takes them so)."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }
