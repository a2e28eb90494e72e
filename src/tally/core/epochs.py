"""A writer's epoch: who applies a fenced journal batch, and in which order (pure values).

A fenced journal batch is applied item by item, each ``UpdateItem`` setting the writer's mark on the item
(``tally.core.fence``). A mark says "this writer's batches up to here are on this item"; it can say so only if
the writer applies its batches one after another. A Lambda execution environment runs one invocation at a time,
so its batches are ordered by construction: an **epoch** is such a writer, a random id drawn at the
environment's first batch (never at init: environments cloned from one snapshot would otherwise share it), and
each of its batches takes the next sequence number.

The epoch's rule, which every mark leans on: **an epoch applies its batch ``s`` to an item only once every
earlier batch of the epoch is DONE.** So the holder of a ``WriterEpoch`` ends it (``ended``) whenever one of its
batches is left unfinished (out of time, throttled, any error): the next batch draws a new epoch, and the batch
left behind is finished, with its own epoch and sequence, by whoever meets its markers.

A fenced batch's id names its epoch and sequence (``FencedBatch.batch_id``): a finisher learns from the id alone
whose marks to write, and never writes its own.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

EPOCH_BYTES: Final = 8
"""Random bytes of an epoch id: 11 characters of base64url, so a mark on an item is about 15 bytes. Two epochs
drawn by any number of environments collide with a probability of about n^2 / 2^65."""
MAX_SEQ: Final = 0xFFFF_FFFF
"""The last batch an epoch numbers: the next one draws a new epoch (a batch id holds the sequence in 8 hex
digits)."""
_FENCED_ID: Final = re.compile(r"[0-9a-f]{16}[0-9a-f]{8}")
"""A fenced batch's id: its epoch's bytes, then its sequence, in hex (24 characters; a chunked batch's are 22,
``tally.commit.applier.UNFENCED_BATCH_ID_BYTES``, and earlier code's uuid4's 32)."""


def _epoch_id(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


@dataclass(frozen=True, slots=True, order=True)
class FencedBatch:
    """One batch of one epoch: the writer of the marks its application sets, and its place in the epoch's order."""

    epoch: str
    """The epoch id (base64url of ``EPOCH_BYTES`` bytes, unpadded)."""
    seq: int
    """Its place in the epoch, from 1."""

    def __post_init__(self) -> None:
        if not 1 <= self.seq <= MAX_SEQ:
            raise ValueError(f"a batch's sequence is between 1 and {MAX_SEQ}, got {self.seq}")
        if len(_epoch_bytes(self.epoch)) != EPOCH_BYTES:
            raise ValueError(f"an epoch id is {EPOCH_BYTES} bytes of base64url, got {self.epoch!r}")

    @property
    def batch_id(self) -> str:
        """The journal batch's id, from which ``parse`` gives this batch back."""
        return f"{_epoch_bytes(self.epoch).hex()}{self.seq:08x}"

    @classmethod
    def parse(cls, batch_id: str) -> FencedBatch | None:
        """The epoch and sequence a batch id names; None for a batch applied without marks (an unfenced id)."""
        if _FENCED_ID.fullmatch(batch_id) is None:
            return None
        return cls(_epoch_id(bytes.fromhex(batch_id[:16])), int(batch_id[16:], 16))


def _epoch_bytes(epoch: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(epoch + "=" * (-len(epoch) % 4))
    except (binascii.Error, ValueError):
        return b""


@dataclass(frozen=True, slots=True)
class WriterEpoch:
    """A writer's epoch and the last batch it numbered; ``epoch`` None until its first batch draws one."""

    epoch: str | None = None
    last_seq: int = 0

    def next_batch(self, random_bytes: Callable[[int], bytes]) -> tuple[WriterEpoch, FencedBatch]:
        """The next batch, and the epoch that numbered it: a new epoch is drawn (from ``random_bytes``) when none
        is current or the current one has numbered its last batch."""
        epoch, last = self.epoch, self.last_seq
        if epoch is None or last >= MAX_SEQ:
            raw = random_bytes(EPOCH_BYTES)
            if len(raw) != EPOCH_BYTES:
                raise ValueError(f"an epoch is drawn from {EPOCH_BYTES} random bytes, got {len(raw)}")
            epoch, last = _epoch_id(raw), 0
        return WriterEpoch(epoch, last + 1), FencedBatch(epoch, last + 1)

    def ended(self) -> WriterEpoch:
        """The epoch after one of its batches was left unfinished: none, so that the next batch draws a new one."""
        return WriterEpoch()
