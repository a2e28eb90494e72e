"""Values of the idempotency ledger: message markers, journal batch headers and claims.

Plain data shared by the applier (``tally.commit.applier``, ``tally.commit``) and the DynamoDB adapters, so the
protocol code never needs to import the adapters to speak about what they store.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tally.core.digest import short_digest
from tally.core.model import IdConflict, RejectCode


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
    digest: bytes = b""
    """The message's content digest, stored on its marker (empty: none stored)."""


@dataclass(frozen=True, slots=True)
class MarkerRecord:
    """What a marker says about a message: when it was written, when it expires, its batch if any, and
    the digest of the content it counts (None on markers written before digests existed)."""

    message_id: str
    applied_at_ms: int
    expires_at_s: int
    batch_id: str | None
    digest: bytes | None = None


def content_conflict(counted: bytes | None, incoming: bytes | None, *, where: str) -> IdConflict | None:
    """Whether a message is another content under an id that counts ``counted``: the rejection, or None.

    Called wherever an existing marker of an applied message (direct, or of a COMMITTED or DONE batch) is
    met, and for the copies of an id within one batch. An unknown digest on either side (a marker written
    before digests existed, a message built without one) matches anything: such a message is treated as
    a duplicate, as before digests. A marker of an ABORTED batch never gets here: it counts nothing, so
    new content replaces it.
    """
    if not counted or not incoming or counted == incoming:
        return None
    detail = (
        f"id reused with different content: {where} has content {short_digest(counted)}, "
        f"this message has {short_digest(incoming)}"
    )
    return IdConflict(RejectCode.ID_CONFLICT, detail, counted)
