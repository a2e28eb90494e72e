"""Values of the idempotency ledger: message markers, journal batch headers and claims.

Plain data shared by the applier (``tally.commit.applier``, ``tally.commit``) and the DynamoDB adapters, so the
protocol code never needs to import the adapters to speak about what they store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from tally.core.digest import short_digest
from tally.core.model import IdConflict, RejectCode
from tally.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Mapping


class BatchState(StrEnum):
    """The states of a journal batch: PREPARING -> COMMITTED -> DONE (chunked), PREPARING -> FENCED -> DONE
    (fenced), PREPARING -> ABORTED."""

    PREPARING = "PREPARING"
    COMMITTED = "COMMITTED"
    """Committed, its chunks applied one transaction each, each with its applied-record."""
    FENCED = "FENCED"
    """Committed, its items applied by fenced writes (``tally.core.fence``), with no applied-record: a state of its
    own, which code without the fenced apply does not know and refuses (it would finish the batch by chunks, every
    item again: docs/journal.md, "Rolling out")."""
    DONE = "DONE"
    ABORTED = "ABORTED"

    @property
    def committed(self) -> bool:
        """Committed and not yet DONE: whoever meets the batch's markers finishes it."""
        return self in (BatchState.COMMITTED, BatchState.FENCED)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """A journal header as read back."""

    batch_id: str
    state: BatchState
    lease_until_ms: int
    chunks: int
    done_at_ms: int | None = None
    """When a fenced batch was marked DONE (the marking invocation's clock); None otherwise."""


@dataclass(frozen=True, slots=True)
class Claim:
    """Mark a message as a batch's; ``replaces`` names the aborted batch whose marker it overwrites."""

    message_id: str
    replaces: str | None = None
    digest: bytes = b""
    """The message's content digest, stored on its marker (empty: none stored)."""
    placed_ms: int | None = None
    """The receive time that placed its events without ``ts`` in their windows, stored on its marker so that a
    later delivery can archive it (``MessageTotals.placed_ms``); None: its windows owe nothing to it."""


@dataclass(frozen=True, slots=True)
class Commit:
    """Which commit counted a message: the identity of the marker that says it counts.

    ``commit`` is the journal batch's id for a journal claim, and ``direct-<applied ms>`` for a direct marker
    (written in the transaction that carried the message's deltas); ``committed_ms`` is the marker's applied
    time, which is the clock of the invocation that wrote it, read once before any of its writes. A message id
    holds at most one live marker at a time, and a marker written again for the same id (past the horizon, or
    replacing an aborted claim) has a later applied time or another batch: so (message id, commit) names one
    counting of one message, whoever learns it (the invocation that committed, or a redelivery that meets the
    marker). The archive keys its records by it (``tally.core.archive``).
    """

    commit: str
    committed_ms: int
    placed_ms: int | None = field(default=None, compare=False)
    """What the marker says placed the message's events without ``ts`` (``Claim.placed_ms``), as a later delivery
    learns it; not part of the commit's identity (the committing invocation knows its own receive time)."""

    @classmethod
    def of_marker(cls, applied_at_ms: int, batch_id: str | None, placed_ms: int | None = None) -> Commit:
        """The commit a marker names: its journal batch, or its own direct write."""
        commit = batch_id if batch_id is not None else f"{DIRECT_COMMIT_PREFIX}{applied_at_ms}"
        return cls(commit, applied_at_ms, placed_ms)


DIRECT_COMMIT_PREFIX = "direct-"
"""``Commit.commit`` of a direct marker: this, then the marker's applied time (journal batch ids are hex)."""


@dataclass(frozen=True, slots=True)
class MarkerRecord:
    """What a marker says about a message: when it was written, when it expires, its batch if any, and
    the digest of the content it counts (None on markers written before digests existed)."""

    message_id: str
    applied_at_ms: int
    expires_at_s: int
    batch_id: str | None
    digest: bytes | None = None
    placed_ms: int | None = None
    """The receive time that placed the message's events without ``ts`` (``Claim.placed_ms``); None: none was
    stored (no such event, or a marker written before markers kept it)."""

    @property
    def commit(self) -> Commit:
        return Commit.of_marker(self.applied_at_ms, self.batch_id, self.placed_ms)


@dataclass(frozen=True, slots=True)
class MarkerMet:
    """What a marker found in a write's way says (DynamoDB's ``ALL_OLD`` on a cancellation, or a read of the
    markers): the journal batch it names (None: a direct marker, written with its message's deltas: applied), the
    digest of the content it counts, its applied time and the receive time that placed its events without ``ts``
    (each None when the marker stores none, or the answer did not return it)."""

    batch_id: str | None = None
    digest: bytes | None = None
    applied_ms: int | None = None
    placed_ms: int | None = None

    @classmethod
    def of(cls, record: MarkerRecord) -> MarkerMet:
        return cls(record.batch_id, record.digest, record.applied_at_ms, record.placed_ms)

    @property
    def commit(self) -> Commit | None:
        """The commit the marker names, when its applied time is known."""
        return None if self.applied_ms is None else Commit.of_marker(self.applied_ms, self.batch_id, self.placed_ms)


class MarkersExistError(StoreError):
    """A write was cancelled because some of its messages already have markers.

    ``markers`` holds what each marker in the way says. ``vanished`` names the messages whose claim found NO
    marker where it expected one: a claim replacing a dead batch's marker, on the condition that the marker still
    names that batch, after TTL deleted it; such a message has no marker at all (neither applied nor claimed), and
    is not in ``markers``. ``message_ids``: both.
    """

    def __init__(self, markers: Mapping[str, MarkerMet], vanished: frozenset[str] = frozenset()) -> None:
        message_ids = frozenset(markers) | vanished
        super().__init__(f"{len(message_ids)} message(s) already have markers")
        self.markers: Mapping[str, MarkerMet] = markers
        self.vanished = vanished
        self.message_ids = message_ids


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
