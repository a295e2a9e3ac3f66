"""What model calls cost, in US dollars, from list prices per million tokens.

The state document's ``tokenUsage.cost`` is computed from these. A model is
priced by the longest matching prefix of its id, else by its family (opus,
sonnet, haiku), else not at all (the offline demo model, unknown providers).
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.events import Usage


@dataclass(slots=True, frozen=True)
class Price:
    """US dollars per million tokens."""

    input: float
    output: float
    cache_write: float
    cache_read: float


_BY_PREFIX = {
    "claude-opus-4-5": Price(5, 25, 6.25, 0.5),
    "claude-opus-4-1": Price(15, 75, 18.75, 1.5),
    "claude-opus-4-0": Price(15, 75, 18.75, 1.5),
    "claude-opus-4-2": Price(15, 75, 18.75, 1.5),
    "claude-3-opus": Price(15, 75, 18.75, 1.5),
    "claude-haiku-4-5": Price(1, 5, 1.25, 0.1),
    "claude-3-5-haiku": Price(0.8, 4, 1, 0.08),
    "claude-3-haiku": Price(0.25, 1.25, 0.3, 0.03),
}
_BY_FAMILY = {
    "opus": Price(5, 25, 6.25, 0.5),
    "sonnet": Price(3, 15, 3.75, 0.3),
    "haiku": Price(1, 5, 1.25, 0.1),
}


def price_of(model: str) -> Price | None:
    model = model.lower()
    matches = [prefix for prefix in _BY_PREFIX if model.startswith(prefix)]
    if matches:
        return _BY_PREFIX[max(matches, key=len)]
    return next((price for family, price in _BY_FAMILY.items() if family in model), None)


def cost_of(usage: Usage) -> float:
    """The cost of one model call; 0 for a model without a price."""
    price = price_of(usage.model)
    if price is None:
        return 0.0
    dollars = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_write_tokens * price.cache_write
        + usage.cache_read_tokens * price.cache_read
    )
    return dollars / 1_000_000
