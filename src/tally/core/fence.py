"""Epoch-fenced apply: a committed journal batch's ADDs as one plain ``UpdateItem`` per item part (pure).

A fenced batch (``tally.core.epochs.FencedBatch``: an epoch and a sequence) is committed as any journal batch (its
claims, its pages, the header PREPARING -> FENCED); then each item gets its ADDs in single-item writes that also
set the epoch's **mark** on the item, ``mark_value(seq, part)``. Each write is conditioned on the mark:

- the item's first part: the epoch's mark is absent or lower than ``mark_value(seq, 0)``. The epoch applies a batch
  only once its earlier batches are DONE (``tally.core.epochs``), so a lower mark is an earlier batch's, and a mark
  at or past this value says the part is on the item already;
- each later part: the mark holds the previous part's value exactly. Parts are sent in order and the next only once
  the previous is known to be on the item, so a mark at or past this part's value says this part is on the item.

So a refused condition means "applied already" (``refusal``): whoever sends a part again (the owner after a lost
answer, a finisher from the pages, two finishers at once) adds it at most once; the sum is exact once every part was
sent until it committed or was refused. A write is sent with the batch's own epoch and sequence, never the
sender's: a finisher reads them from the batch id.

A finisher (a container meeting a marker of a FENCED batch, the owner's redelivery among them) first reads the
items' marks of the batch's epoch and sends only the parts the marks do not show on the items (``still_to_send``):
a finisher cut short by its deadline leaves its progress on the items for the next one, which then sends only
what is missing.

Marks are removed by writes the item gets anyway (``prunable``): another epoch's mark whose batch has been DONE for
longer than any finisher that read it FENCED can still run (``fence_horizon_ms``), each removal conditioned on the
mark still holding the value seen.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Final, Protocol

from tally.core.epochs import MAX_SEQ, FencedBatch
from tally.core.items import item_label
from tally.core.ledger import BatchState
from tally.core.numbers import add, storage_problem
from tally.core.plan import counter_parts, no_counter_limit
from tally.core.write import FencedWrite
from tally.core.write_planner import start_values

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from tally.core.aggregate import Totals
    from tally.core.defaults import CounterDefaults
    from tally.core.items import ItemKey
    from tally.core.numbers import Number
    from tally.core.plan import CounterLimit

PART_SLOTS: Final = 1024
"""Parts one item can take in one batch: a mark is ``seq * PART_SLOTS + part``. An item holds far fewer counters
than ``PART_SLOTS`` ADDs carry (400 KB / 3 bytes per counter at least, at 100 or more counters per ADD)."""

MAX_PRUNES_PER_WRITE: Final = 4
"""Other epochs' marks one write removes at most: a write stays small, and the next write of the item takes more."""

MAX_HEADER_READS_PER_BATCH: Final = 8
"""Headers of other epochs' batches a fenced batch reads at most to learn whether their marks may go."""

MAX_MARK: Final = MAX_SEQ * PART_SLOTS + PART_SLOTS - 1
"""The largest value a mark takes (13 digits: 8 bytes as a DynamoDB Number)."""


def mark_value(seq: int, part: int) -> int:
    """The value of an epoch's mark once part ``part`` of its batch ``seq`` is on an item."""
    if not 0 <= part < PART_SLOTS:
        raise ValueError(f"an item takes at most {PART_SLOTS} parts per batch, got part {part}")
    return seq * PART_SLOTS + part


def mark_batch(epoch: str, mark: int) -> FencedBatch | None:
    """The batch whose part set ``mark``; None if the mark names none (not written by ``mark_value``)."""
    try:
        return FencedBatch(epoch, mark // PART_SLOTS)
    except ValueError:
        return None


class FencedPlanner(Protocol):
    """``plan_fenced_apply``, or a variant of it (the chaos run's broken ones are such variants, passed in)."""

    def __call__(
        self,
        increments: Totals,
        batch: FencedBatch,
        *,
        defaults: CounterDefaults,
        counter_limit: CounterLimit = ...,
        prune: Mapping[ItemKey, Mapping[str, int]] | None = None,
    ) -> tuple[tuple[FencedWrite, ...], ...]: ...


class PruneRule(Protocol):
    """``prunable``, or a variant of it (the chaos run's broken ones are such variants, passed in)."""

    def __call__(
        self,
        fence: Mapping[str, int],
        own_epoch: str | None,
        seen: Mapping[FencedBatch, HeaderSeen],
        now_ms: int,
        horizon_ms: int,
    ) -> dict[str, int]: ...


def plan_fenced_apply(
    increments: Totals,
    batch: FencedBatch,
    *,
    defaults: CounterDefaults,
    counter_limit: CounterLimit = no_counter_limit,
    prune: Mapping[ItemKey, Mapping[str, int]] | None = None,
) -> tuple[tuple[FencedWrite, ...], ...]:
    """Every item's writes of a committed batch, one tuple per item, its parts in the order they must be sent.

    ``increments`` are the batch's (its pages'), zero deltas dropped; an item with more counters than one ADD holds
    (``counter_limit``) takes several parts, cut as the journal cuts them. ``prune`` (item -> other epochs' marks to
    remove, from ``prunable``) rides on the item's first part.
    """
    plans: list[tuple[FencedWrite, ...]] = []
    for item, counters in increments.items():
        adds = {name: delta for name, delta in counters.items() if delta}
        if not adds:
            continue
        removing = {epoch: value for epoch, value in (prune or {}).get(item, {}).items() if epoch != batch.epoch}
        writes: list[FencedWrite] = []
        for part, chunk in enumerate(counter_parts(adds, counter_limit(item))):
            mark = mark_value(batch.seq, part)
            writes.append(
                FencedWrite(
                    item=item,
                    adds=chunk,
                    starts=start_values(item, chunk, defaults),
                    epoch=batch.epoch,
                    mark=mark,
                    after=None if part == 0 else mark - 1,
                    prune=removing if part == 0 else {},
                )
            )
        plans.append(tuple(writes))
    return tuple(plans)


def still_to_send(
    plans: Sequence[Sequence[FencedWrite]], marks: Mapping[ItemKey, int]
) -> tuple[tuple[FencedWrite, ...], ...]:
    """The parts of a batch's ``plans`` (``plan_fenced_apply``) a finisher still sends, from the marks it read of
    the batch's epoch on the items (item -> value; an item absent: no mark read, every part sent).

    A part whose mark value the read mark reaches was applied to the item: a mark is set only by the write that
    adds its part, and only grows while its batch is unfinished (the epoch applies no later batch before this one
    is DONE, and ``prunable``, which a window move's prune follows too, removes only marks of batches DONE or
    gone for a horizon), so any read of it, however stale, shows a value some write of this batch or an earlier
    one set. A read that misses (stale, absent) only leaves parts to send that
    the condition then refuses as applied: the read saves requests, the condition stays the guard. An item whose
    parts are all on it drops out; the rest keep their order, the first one left still after its predecessor.
    """
    left: list[tuple[FencedWrite, ...]] = []
    for writes in plans:
        if not writes:
            continue
        seen = marks.get(writes[0].item)
        rest = tuple(write for write in writes if seen is None or write.mark > seen)
        if rest:
            left.append(rest)
    return tuple(left)


class Refusal(Enum):
    """What a fenced write's refused condition means, from the marks the refusal returned (``ALL_OLD``)."""

    APPLIED = "applied"
    """The part is on the item already (an earlier attempt, or another finisher): nothing more to send."""
    PRUNE_MOVED = "prune_moved"
    """A mark it would remove moved on since it was seen: send it again without removing any."""
    OUT_OF_ORDER = "out_of_order"
    """The item lacks the previous part: the parts were not sent in order. Never expected; the batch stays
    FENCED for a finisher, which sends every part from the first."""


def refusal(write: FencedWrite, fence: Mapping[str, int]) -> Refusal:
    """Why ``write`` was refused by an item whose marks were ``fence``."""
    own = fence.get(write.epoch)
    if own is not None and own >= write.mark:
        return Refusal.APPLIED
    if write.after is not None and own != write.after:
        return Refusal.OUT_OF_ORDER
    return Refusal.PRUNE_MOVED


def without_prune(write: FencedWrite) -> FencedWrite:
    return replace(write, prune={})


def fence_horizon_ms(timeout_s: int, clock_margin_ms: int) -> int:
    """How long after its ``done_at`` a fenced batch's marks may go.

    A finisher that read the batch FENCED did so before it was DONE, and stops within its invocation's
    ``timeout_s``. ``done_at`` is the clock of the invocation that marked the batch DONE, read once at its start,
    so the batch became DONE up to one more ``timeout_s`` after ``done_at``: twice the timeout, plus
    ``clock_margin_ms`` for clocks that differ between that invocation and the pruner.
    """
    return 2 * timeout_s * 1000 + clock_margin_ms


@dataclass(frozen=True, slots=True)
class HeaderSeen:
    """A fenced batch's header as a pruner read it."""

    state: BatchState | None
    """None: no header (the TTL sweep deleted it)."""
    read_at_ms: int
    """No earlier than the read: a gone header's marks wait a horizon from it (the clock an invocation read at its
    start is too early; its lease end is safe)."""
    done_at_ms: int | None = None
    """When it was marked DONE (the marker's clock), if it is."""
    consistent: bool = False
    """A strongly consistent read: only such a read may say the header is gone (an eventually consistent one may
    miss a header just written)."""


def batches_to_look_up(
    fence: Mapping[str, int], own_epoch: str, seen: Mapping[FencedBatch, HeaderSeen]
) -> tuple[FencedBatch, ...]:
    """The batches of other epochs' marks whose headers are worth reading: not yet seen DONE or gone."""
    wanted = [mark_batch(epoch, mark) for epoch, mark in fence.items() if epoch != own_epoch]
    return tuple(sorted(batch for batch in wanted if batch is not None and not _settled(seen.get(batch))))


def _settled(header: HeaderSeen | None) -> bool:
    if header is None:
        return False
    return header.state is BatchState.DONE or (header.state is None and header.consistent)


def prunable(
    fence: Mapping[str, int],
    own_epoch: str | None,
    seen: Mapping[FencedBatch, HeaderSeen],
    now_ms: int,
    horizon_ms: int,
) -> dict[str, int]:
    """The other epochs' marks a write of the item may remove (epoch -> the value seen), oldest batches first.

    A mark may go once no write of its batch, or of an earlier batch of its epoch, can reach the item again:
    its batch was DONE ``horizon_ms`` ago (the epoch's earlier batches were DONE before it was committed), or its
    header was found gone by a consistent read ``horizon_ms`` ago (a finisher applies only a batch it read
    FENCED, so before that read). A later batch of the epoch is applied as a first application would be, and
    sets the mark again.
    """
    due: list[tuple[FencedBatch, str, int]] = []
    for epoch, mark in fence.items():
        if epoch == own_epoch:
            continue
        batch = mark_batch(epoch, mark)
        header = seen.get(batch) if batch is not None else None
        if batch is None or header is None:
            continue
        if header.state is BatchState.DONE and header.done_at_ms is not None:
            since = header.done_at_ms
        elif header.state is None and header.consistent:
            since = header.read_at_ms
        else:
            continue
        if since + horizon_ms < now_ms:
            due.append((batch, epoch, mark))
    due.sort(key=lambda entry: entry[0].seq)
    return {epoch: mark for _, epoch, mark in due[:MAX_PRUNES_PER_WRITE]}


def unstorable_sums(stored: Mapping[ItemKey, Mapping[str, Number]], increments: Totals) -> dict[ItemKey, str]:
    """The items whose stored value plus the batch's increment DynamoDB would refuse (38 digits, the Number range),
    with why: the check of a strongly consistent read made before the commit, while the batch can still abort."""
    problems: dict[ItemKey, str] = {}
    for item, counters in increments.items():
        values = stored.get(item, {})
        for name, increment in counters.items():
            problem = storage_problem(add(values.get(name, 0), increment))
            if problem is not None:
                problems[item] = f"{item_label(item)!r}/{name!r}: the stored value plus {increment}: {problem}"
    return problems
