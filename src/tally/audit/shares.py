"""The recount split by key: each share decodes every archive object and recounts the keys that fall in it.

A key's values depend only on the countings that touch it (its deltas, its resets, its gauges and members), so
the keys can be recounted apart: ``recount_share(bodies, index, settings)`` keeps the records that touch a key
of share ``index`` (``share_of``: CRC-32 of the key, modulo the shares), recounts them, and keeps of the result
only its own keys (a record touching keys of two shares is recounted in both, each keeping its own). The
auditor runs the shares in processes of their own (``tally.audit.auditor``): the recount is pure Python, one
core each. ``merge`` puts the shares' recounts back together.

Each share also returns what the auditor keeps of every record without holding them all: (id, commit, digest)
for the identities (``tally.audit.auditor``: ids counted twice, ids reused), the repairs (never recounted),
each key's latest ``archived_ms``, and the keys of the records written before their deltas landed, by commit.

Pure: no I/O (the bodies are passed in), no clock.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tally.audit.corrections import is_repair
from tally.audit.recount import Recount, gc_paused, recount
from tally.core.archive import decode_records
from tally.core.items import owner_key
from tally.core.views import NO_VIEWS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from tally.core.archive import ArchiveRecord
    from tally.core.defaults import CounterDefaults
    from tally.core.views import CounterViews
    from tally.core.windows import WindowSpec


@dataclass(frozen=True, slots=True)
class ShareSettings:
    shares: int
    spec: WindowSpec
    defaults: CounterDefaults
    prefix: str
    tolerance_ms: int
    views: CounterViews = NO_VIEWS


@dataclass(frozen=True, slots=True)
class Share:
    recounted: Recount
    """The recount of the share's keys (only theirs)."""
    read: int
    """Records under the prefix in the objects (every share reads them all)."""
    identities: list[tuple[str, str, str]] = field(default_factory=list)
    """(id, commit, digest) of each record kept (copies included)."""
    repairs: list[ArchiveRecord] = field(default_factory=list)
    last_archived: dict[str, int] = field(default_factory=dict)
    """Key -> the latest ``archived_ms`` of the records touching it."""
    before_landing: dict[str, set[str]] = field(default_factory=dict)
    """Commit (a fenced batch) -> the keys touched by its records written before its deltas landed: what the
    auditor cannot place until it sees the batch landed (``tally.audit.cut``)."""


def share_of(key: str, shares: int) -> int:
    """Which share ``key`` falls in (the same in every process: not Python's salted ``hash``); a view item's, its
    event key's (a share recounts the records of its keys, and their views with them)."""
    return zlib.crc32(owner_key(key).encode("utf-8", "surrogatepass")) % shares


def recount_share(bodies: Sequence[bytes], index: int, settings: ShareSettings) -> Share:
    """Decode every body, keep the records touching a key of share ``index`` (repairs apart), recount them (the
    collector paused throughout: ``gc_paused``)."""
    with gc_paused():
        return _recount_share(bodies, index, settings)


def _recount_share(bodies: Sequence[bytes], index: int, settings: ShareSettings) -> Share:
    kept: list[ArchiveRecord] = []
    repairs: list[ArchiveRecord] = []
    identities: list[tuple[str, str, str]] = []
    last: dict[str, int] = {}
    unlanded: dict[str, set[str]] = {}
    read = 0
    prefix, shares = settings.prefix, settings.shares
    for body in bodies:
        for record in decode_records(body):
            keys = [event.key for event in record.events if event.key.startswith(prefix)]
            if not keys:
                continue
            read += 1
            mine = [key for key in keys if shares == 1 or share_of(key, shares) == index]
            if not mine:
                continue
            if is_repair(record):
                repairs.append(record)
                continue
            kept.append(record)
            identities.append((record.id, record.commit, record.digest))
            for key in mine:
                if record.archived_ms > last.get(key, -1):
                    last[key] = record.archived_ms
            if record.before_landing:
                unlanded.setdefault(record.commit, set()).update(mine)
    recounted = recount(
        kept,
        windows=settings.spec,
        defaults=settings.defaults,
        clock_tolerance_ms=settings.tolerance_ms,
        views=settings.views,
    )
    if shares > 1:
        recounted = restricted(recounted, lambda key: share_of(key, shares) == index)
    return Share(recounted, read, identities, repairs, last, unlanded)


def restricted(recounted: Recount, wanted: Callable[[str], bool]) -> Recount:
    """The recount of the keys ``wanted(key)`` accepts."""
    return Recount(
        counters={key: values for key, values in recounted.counters.items() if wanted(key)},
        windows={key: values for key, values in recounted.windows.items() if wanted(key)},
        gauges={key: values for key, values in recounted.gauges.items() if wanted(key)},
        distinct={key: values for key, values in recounted.distinct.items() if wanted(key)},
        inexact={slot: why for slot, why in recounted.inexact.items() if wanted(slot[0])},
        records=recounted.records,
        messages=recounted.messages,
        digest_mismatches=recounted.digest_mismatches,
    )


def merge(shares: Sequence[Share]) -> Recount:
    """The shares' recounts as one (their keys are apart)."""
    return Recount(
        counters={key: values for share in shares for key, values in share.recounted.counters.items()},
        windows={key: values for share in shares for key, values in share.recounted.windows.items()},
        gauges={key: values for share in shares for key, values in share.recounted.gauges.items()},
        distinct={key: values for share in shares for key, values in share.recounted.distinct.items()},
        inexact={slot: why for share in shares for slot, why in share.recounted.inexact.items()},
        records=shares[0].read if shares else 0,
        messages=sum(share.recounted.messages for share in shares),
        digest_mismatches=tuple(sorted({i for share in shares for i in share.recounted.digest_mismatches})),
    )
