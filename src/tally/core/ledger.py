"""Values of the idempotency ledger: message markers, journal batch headers and claims.

Plain data shared by the applier (``tally.apply``, ``tally.commit``) and the DynamoDB adapters, so the
protocol code never needs to import the adapters to speak about what they store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BatchState(StrEnum):
    """The states of a journal batch. Only PREPARING -> COMMITTED -> DONE and PREPARING -> ABORTED exist."""

    PREPARING = "PREPARING"
    COMMITTED = "COMMITTED"
    DONE = "DONE"
    ABORTED = "ABORTED"


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A journal header as read back."""

    batch_id: str
    state: BatchState
    lease_until_ms: int
    chunks: int


@dataclass(frozen=True, slots=True)
class Claim:
    """Mark a message as a batch's; ``replaces`` names the aborted batch whose marker it overwrites."""

    message_id: str
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class MarkerRecord:
    """What a marker says about a message: when it was written, when it expires, and its batch if any."""

    message_id: str
    applied_at_ms: int
    expires_at_s: int
    batch_id: str | None
