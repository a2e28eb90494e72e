"""A direct transaction's write as the core decided it, and what a write reads: values only.

``DirectWrite`` is what ``tally.core.write_planner.plan_write`` decides for one transaction and the counter store
encodes (``tally.store.dynamodb.DynamoDBCounterStore.write``): the markers, one ``ItemWrite`` per item (its ADDs
and start values, a reset's values and the operator's record, its conditions), the crossings it records. The
store turns each field into DynamoDB's words and decides nothing; an ``ItemWrite`` is one ``Update`` (or, when it
writes nothing, one ``ConditionCheck``) whatever carries it.

``FencedWrite`` is one item's part of a fenced journal batch, as ``tally.core.fence.plan_fenced_apply`` decides it
and the journal's store encodes it: one plain ``UpdateItem`` with its ADDs and the writer's mark.

``ItemRead`` is one counter item as a strongly consistent read, or a refused condition's ``ALL_OLD``, found it;
``ReadFirst`` names the items a write must read before it can be planned, ``Seen`` holds what was read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tally.core.moved import MovedPointer
from tally.core.numbered_ids import marker_item

if TYPE_CHECKING:
    from collections.abc import Mapping
    from decimal import Decimal

    from tally.core.bounds import BoundCheck
    from tally.core.items import ItemKey
    from tally.core.ledger import Claim
    from tally.core.numbers import Number
    from tally.core.resets import OperatorStamp
    from tally.core.thresholds import Crossing, CrossingFree, ExactCheck

_NO_POINTER = MovedPointer()


@dataclass(frozen=True, slots=True)
class MovesSeen:
    """A key item's count of window moves as read with the moved parts of its ended windows: a write conditioned
    on it still being so commits only if no move took more of a window since (``tally.core.moved``)."""

    count: Decimal | None
    """None: the item had no move yet (the attribute is missing)."""


@dataclass(frozen=True, slots=True)
class ItemRead:
    """One counter item as a strongly consistent read, or a refused condition's ``ALL_OLD``, found it."""

    counters: Mapping[str, Decimal] = field(default_factory=dict)
    """Every counter it holds, named as a batch's totals name it (an open window's by ``window_counter``); a
    missing counter is absent."""
    moves: Decimal | None = None
    """Its count of window moves (a key's item; None: never moved)."""
    pointers: Mapping[str, MovedPointer] = field(default_factory=dict)
    """Window unit -> its pointer to the newest window moved (a key's item: ``tally.core.moved``)."""

    def pointer(self, unit: str) -> MovedPointer:
        """``unit``'s pointer (one that moved nothing and was never kept, if the item has none)."""
        return self.pointers.get(unit, _NO_POINTER)


@dataclass(frozen=True, slots=True)
class ReadFirst:
    """The items a write must read, strongly consistent, before it can be planned."""

    items: tuple[ItemKey, ...]


@dataclass(frozen=True, slots=True)
class Seen:
    """What was read for a write, and what the apply call knows of key items' moves."""

    items: Mapping[ItemKey, ItemRead] = field(default_factory=dict)
    """Read for this write: their counters are current."""
    key_items: Mapping[ItemKey, ItemRead] = field(default_factory=dict)
    """Key items whose count of moves and pointers are known (read, or returned by a refusal, in this apply
    call): what they say of a window stays true while the count does, which the write is conditioned on."""

    def with_read(self, found: Mapping[ItemKey, ItemRead]) -> Seen:
        return Seen({**self.items, **found}, {**self.key_items, **found})


@dataclass(frozen=True, slots=True)
class ItemWrite:
    """What one item gets in a write: one action, an ``Update`` or, when it writes nothing, a ``ConditionCheck``."""

    item: ItemKey
    adds: Mapping[str, Number] = field(default_factory=dict)
    """Counter -> the net delta added (non-zero)."""
    starts: Mapping[str, Number] = field(default_factory=dict)
    """Counter of ``adds`` -> its start value: ``c = if_not_exists(c, start) + delta`` (a key's all-time item)."""
    sets: Mapping[str, Number] = field(default_factory=dict)
    """A reset's values: ``c = value``."""
    stamp: OperatorStamp | None = None
    """A reset's or correction's record (on the key's all-time item)."""
    bounds: tuple[BoundCheck, ...] = ()
    free: tuple[CrossingFree, ...] = ()
    exact: tuple[ExactCheck, ...] = ()
    moves: MovesSeen | None = None
    """The key item's count of moves as read with the moved parts its conditions were shifted by: no move since."""

    @property
    def writes(self) -> bool:
        """Whether it changes the item; else it only checks its conditions."""
        return bool(self.adds or self.sets or self.stamp is not None)

    @property
    def conditioned(self) -> bool:
        return bool(self.bounds or self.free or self.exact or self.moves is not None)


@dataclass(frozen=True, slots=True)
class FencedWrite:
    """One part of one item of a fenced journal batch: its ADDs and the mark that says the part is on the item.

    It commits only if the item's mark of ``epoch`` allows it (``after``); a write refused by that condition was
    applied already (``tally.core.fence.refusal``). ``prune`` removes other epochs' marks riding along, each only
    if it still holds the value seen.
    """

    item: ItemKey
    adds: Mapping[str, Number]
    """Counter -> the net delta added (non-zero)."""
    starts: Mapping[str, Number]
    """Counter of ``adds`` -> its start value: ``c = if_not_exists(c, start) + delta`` (a key's all-time item)."""
    epoch: str
    """The batch's epoch: the owner's, whoever sends the write."""
    mark: int
    """The value the epoch's mark takes: ``tally.core.fence.mark_value`` of the batch's sequence and this part."""
    after: int | None
    """The mark's value this part follows (the item's previous part of the batch); None for the first part, which
    needs the mark absent or lower than ``mark``."""
    prune: Mapping[str, int] = field(default_factory=dict)
    """Another epoch -> its mark's value as seen: removed if it still holds that value."""


@dataclass(frozen=True, slots=True)
class FenceAnswer:
    """What a fenced write's answer says: whether it committed, and the item's marks (epoch -> value) after it
    (``ALL_NEW``) or, refused, as they were (``ALL_OLD``)."""

    committed: bool
    fence: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DirectWrite:
    """One direct transaction, as decided: its markers, its items, the crossings it records, at the batch's clock."""

    claims: tuple[Claim, ...]
    items: tuple[ItemWrite, ...]
    at_ms: int
    """The batch's clock: the markers' applied time and the base of their expiry."""
    crossings: tuple[Crossing, ...] = ()
    replaced: tuple[str, ...] = ()
    """Journal batches whose markers the claims replace: each checked once still ABORTED (or gone past its horizon)."""
    spill_batch: str | None = None
    """The journal batch whose pages record the crossings that do not fit (``tally.core.plan.Spill``): the markers
    name it, so that the pages commit with the counts."""
    moved: Mapping[ItemKey, Mapping[str, Number]] = field(default_factory=dict)
    """Key item -> window counter -> the part moved off it that its conditions were shifted by (what was assumed)."""

    @property
    def action_count(self) -> int:
        """The transaction's actions: one per marker item (a block's claims share one), per replaced batch, per item
        and per crossing recorded."""
        markers = len({marker_item(claim.message_id) for claim in self.claims})
        return markers + len(self.replaced) + len(self.items) + len(self.crossings)
