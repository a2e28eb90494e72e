"""Which countings a read of the counters table can hold: the audit against live traffic.

The archive is written after the commit, so a read of the table may hold countings the archive does not show
yet, and the archive read later shows countings the table read could not hold. ``tally audit`` therefore
reads the archive, then the table (noting each read's ``ReadInterval`` on its own clock), then lists the
archive again, and places each counting of the keys read against the interval of their read:

- **before**: its deltas had landed before the read began (``archived_ms``, read after its commit, is
  earlier than the read's start): the read holds it;
- **after**: its invocation began after the read ended (``committed_ms``, read before any of its writes, is
  later): the read cannot hold it, and the recount leaves it out;
- **uncertain**: between the two. The values it touches cannot be judged from this read: they are
  ``unsettled``, and the audit reads them again after a pause; the values it does not touch still can.

The clocks are the Lambda containers' and the auditor's: ``tolerance_ms`` of doubt is allowed between them
on both sides. A counting committed before the read whose archive write came late (a crash repaired by a
redelivery) shows as drift until the archive holds it: the audit's second look, after its pause, finds it.

A record written **before its deltas landed** (``ArchiveRecord.before_landing``: the archive write of a batch ran
beside its last fenced journal batch's item writes) bounds nothing by its ``archived_ms``. Its commit is that fenced
batch, whose journal header says whether they landed: DONE is written after every item write, and a header gone
(its TTL, past the marker horizon) means no finisher can land them any more, so drift on them is then real. The
auditor reads the headers of such batches before each read of the table (``landed``: batch -> the auditor's time
when that header read ended, by which they had landed): a counting whose batch it saw landed is placed by that
time (the same clock as the read: no tolerance), one it did not see landed has no bound (uncertain, or after).
A copy of the same counting written after the landing (a redelivery that finished the batch) bounds it as any
record does.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.core.archive import ArchiveRecord


@dataclass(frozen=True, slots=True)
class ReadInterval:
    """When a read of the table ran, on the auditor's clock: just before its first request, just after its
    last answer (epoch ms)."""

    start_ms: int
    end_ms: int


class Place(StrEnum):
    BEFORE = "before"
    UNCERTAIN = "uncertain"
    AFTER = "after"


def place(
    committed_ms: int,
    archived_ms: int | None,
    read: ReadInterval,
    tolerance_ms: int,
    *,
    seen_landed_ms: int | None = None,
) -> Place:
    """Where a counting (its invocation's start ``committed_ms``; ``archived_ms``, by which its deltas had landed,
    on the functions' clock; ``seen_landed_ms``, by which the auditor saw them landed, on its own clock; either may
    be unknown) falls against ``read``."""
    if archived_ms is not None and archived_ms + tolerance_ms < read.start_ms:
        return Place.BEFORE
    if seen_landed_ms is not None and seen_landed_ms <= read.start_ms:
        return Place.BEFORE
    if committed_ms > read.end_ms + tolerance_ms:
        return Place.AFTER
    return Place.UNCERTAIN


@dataclass(frozen=True, slots=True)
class Split:
    """Records (every copy) of the countings a read holds, and of those it may or may not hold."""

    before: list[ArchiveRecord]
    uncertain: list[ArchiveRecord]


def split(
    records: Iterable[ArchiveRecord],
    read: ReadInterval,
    tolerance_ms: int,
    landed: Mapping[str, int] | None = None,
) -> Split:
    """The records by their counting's place (copies of one counting, one (id, commit), share it: the earliest
    ``archived_ms`` of its copies written after the landing decides, or ``landed[commit]`` for one written before
    it); those after the read are left out."""
    seen = landed or {}
    groups: dict[tuple[str, str], list[ArchiveRecord]] = {}
    for record in records:
        groups.setdefault((record.id, record.commit), []).append(record)
    before: list[ArchiveRecord] = []
    uncertain: list[ArchiveRecord] = []
    for (_, commit), copies in groups.items():
        archived = min((record.archived_ms for record in copies if not record.before_landing), default=None)
        seen_landed = seen.get(commit) if any(record.before_landing for record in copies) else None
        where = place(copies[0].committed_ms, archived, read, tolerance_ms, seen_landed_ms=seen_landed)
        if where is Place.BEFORE:
            before.extend(copies)
        elif where is Place.UNCERTAIN:
            uncertain.extend(copies)
    return Split(before, uncertain)
