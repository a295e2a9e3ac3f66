"""What an admin page's live refresh polls: whether what it shows can still change, and a version
of it that changes whenever the page would."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Liveness:
    live: bool
    version: str  # changes whenever what the page shows would change

    @classmethod
    def of(cls, *, live: bool, fingerprint: str) -> Liveness:
        """``fingerprint`` names everything the page shows that can change; the version is its digest."""
        return cls(live=live, version=hashlib.sha1(fingerprint.encode(), usedforsecurity=False).hexdigest()[:16])
