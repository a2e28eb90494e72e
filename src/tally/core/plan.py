"""Transaction planning: pack messages into ``TransactWriteItems`` calls that each fit DynamoDB's limits.

It decides what travels together (the protocol cuts a refused transaction's messages again, with these same
functions, from what DynamoDB answered: ``tally.commit.protocol``); what each transaction writes, and on which
conditions, is ``tally.core.write_planner``'s. The rule that makes counting exactly-once
is that a message's idempotency marker is committed in the same transaction as every delta it carries;
so a message is never split across transactions, and a transaction holds one conditional action per
marker item plus one ``ADD`` per distinct key of those messages, at most ``max_actions`` in all. A marker
item holds one message's marker, or those of several consecutive numbered messages of one producer session
(a block, ``tally.core.numbered_ids.marker_item``), which share one action.

Packing is greedy, in batch order. A new transaction starts when the next message would overflow the
action limit, or when adding it would make some key's net delta unstorable (more than 38 significant
digits) even though each message alone is fine. A message that cannot be written even alone is
rejected here with a reason, before any I/O.

Every ``ADD`` also stays within ``counter_limit(item)`` counters: DynamoDB refuses an update expression
over 4 KB, and only the store adapter knows how long its expressions are
(``tally.store.expressions.counters_per_add``), so the applier passes that bound in. A transaction holds
one action per item, so an item whose counters need more than one ADD is split across transactions: such
a unit goes through the commit journal, whose apply chunks each carry one part of the item, exactly once.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, TypeAlias

from tally.core.aggregate import MessageTotals, Totals, add_into, merge_totals
from tally.core.items import ItemKey, item_label
from tally.core.limits import TRANSACT_MAX_ACTIONS
from tally.core.model import RejectCode, Rejection
from tally.core.numbered_ids import marker_item
from tally.core.numbers import INT_STORABLE_BELOW, Number, add, storage_problem
from tally.core.thresholds import CrossingPage
from tally.core.write_cost import (
    direct_write_units,
    fenced_journal_price,
    page_entry_bytes,
    planner_page_bytes,
)
from tally.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence

    from tally.core.thresholds import Crossing
    from tally.core.write import ItemRead
    from tally.core.write_cost import PageBytes

JournalPage: TypeAlias = "Totals | CrossingPage"
"""What one journal page holds and one apply chunk writes: increments (a unit too large for one transaction), or
crossings to record (a message whose crossings do not fit the transaction that commits it: ``Spill``)."""


CounterLimit: TypeAlias = "Callable[[ItemKey], int]"
"""The most counters one ``ADD`` on an item can carry (the store's ``counters_per_add``)."""


def no_counter_limit(_: ItemKey) -> int:
    """For tests and tools that plan without a store: no bound on counters per ADD."""
    return sys.maxsize


@dataclass(frozen=True, slots=True)
class Spill:
    """Where the crossings that do not fit a chunk's transaction are recorded: the pages of journal batch
    ``batch_id``, written with its header (``COMMITTED``, its chunks those pages) before the transaction.

    The transaction writes the messages' markers naming that batch, so the crossings commit with it, all or
    nothing: until it commits, no marker names the batch and nothing reads it; once it has, whoever meets a
    marker finishes the batch (``CommitProtocol.resolve``), writing each page's notifications once, as any
    committed batch's chunks are applied once.
    """

    batch_id: str
    lease_until_ms: int
    """The batch's lease as its header says (its items expire a TTL and a grace after it)."""
    pages: tuple[CrossingPage, ...]

    @property
    def paged(self) -> frozenset[str]:
        """The notification ids the pages record: the transaction records every other crossing."""
        return frozenset(crossing.notification_id for page in self.pages for crossing in page.crossings)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One transaction: the messages it marks applied and the net increments it adds per key."""

    messages: tuple[MessageTotals, ...]
    increments: Totals
    """key -> counter -> non-zero net delta; keys whose counters all net to zero are left out."""
    replaces: Mapping[str, str] = field(default_factory=dict)
    """Message id -> the aborted journal batch its marker names: the transaction replaces that marker, on the
    condition that it still names the batch and that the batch's header says ABORTED (one more action per
    batch). Only a bounded message is written so (``plan_batch``); any other goes to a journal claim."""
    before: Mapping[ItemKey, ItemRead | None] = field(default_factory=dict)
    """Item -> what a refused crossing condition met (DynamoDB's ``ALL_OLD``; None: no item): the transaction is
    then planned from exactly those values, conditioned on them and recording the crossings its steps make from
    them (``tally.core.write_planner``). Empty: every thresholded write carries the crossing-free condition."""
    attempt: int = 0
    """How many times this chunk was planned again from values met (bounded: a busy key is handed back)."""
    spill: Spill | None = None
    """Crossings of its messages that do not fit the transaction beside its markers and writes: recorded by the
    pages of a journal batch its markers name (``Spill``); None: every crossing in the transaction."""

    @property
    def message_ids(self) -> tuple[str, ...]:
        return tuple(message.message_id for message in self.messages)

    @property
    def marker_items(self) -> int:
        """Marker items the transaction writes: one action each, whatever the messages they hold."""
        return _marker_count(self.messages)

    @property
    def items(self) -> frozenset[Hashable]:
        """Every item the transaction writes, counter items and marker items: two transactions that share
        one conflict on AWS (``TransactionConflict``) when they are in flight at once."""
        return frozenset(
            [("key", key) for key in self.increments]
            + [("marker", marker_item(m.message_id)) for m in self.messages]
            + [("batch", batch) for batch in self.replaces.values()]
        )

    @property
    def action_count(self) -> int:
        return self.marker_items + len(self.increments) + len(set(self.replaces.values()))

    @property
    def event_count(self) -> int:
        return sum(message.event_count for message in self.messages)


class ConditionRefusedError(StoreError):
    """A write's condition failed: a bounded counter would cross its floor or ceiling, or a thresholded one would
    cross a level (or no longer holds the value an exact write was planned from, or a move came since).

    ``found`` holds each refused item as the condition met it (DynamoDB's ``ALL_OLD``; None: there was no item).
    Nothing of the transaction was applied: the protocol plans it again from those values (``Chunk.before``), or
    applies its messages one by one, in order, refusing only those that cross a bound (judged by
    ``tally.core.write_planner.counters_met``). Keyed by ``ItemKey``, the item's identity (beside the value it
    carries: ``tally.errors``).
    """

    def __init__(self, found: Mapping[ItemKey, ItemRead | None]) -> None:
        super().__init__(f"a condition of {', '.join(sorted(map(item_label, found)))[:200]} failed")
        self.found = found


@dataclass(frozen=True, slots=True)
class WritePlan:
    """The transactions to run, in order, and the messages that can never be written."""

    chunks: tuple[Chunk, ...]
    rejected: Mapping[str, Rejection] = field(default_factory=dict)


def plan_transactions(
    messages: Sequence[MessageTotals],
    max_actions: int = TRANSACT_MAX_ACTIONS,
    counter_limit: CounterLimit = no_counter_limit,
) -> WritePlan:
    """Pack distinct messages into transactions of at most ``max_actions`` actions each.

    A message that needs more than ``counter_limit`` counters on one item cannot be written in a direct
    transaction at all (two actions on one item cannot share a transaction): it is rejected here, and
    ``plan_batch`` sends its unit through the journal instead.
    """
    chunks: list[Chunk] = []
    rejected: dict[str, Rejection] = {}
    members: list[MessageTotals] = []
    markers: set[str] = set()
    sums: dict[ItemKey, dict[str, Number]] = {}
    sums_storable = _sums_storable(messages)

    def close() -> None:
        if members:
            chunks.append(_chunk(members, sums))
            members.clear()
            markers.clear()
            sums.clear()

    for message in messages:
        rejection = _unwritable(message, max_actions, counter_limit, storable=sums_storable)
        if rejection is not None:
            rejected[message.message_id] = rejection
            continue
        new_keys = sum(1 for key in message.totals if key not in sums)
        marker = marker_item(message.message_id)
        if (
            len(markers) + (marker not in markers) + len(sums) + new_keys > max_actions
            or (not sums_storable and not _fits(sums, message.totals))
            or not _within_counter_limit(sums, message.totals, counter_limit)
        ):
            close()
        members.append(message)
        markers.add(marker)
        add_into(sums, message.totals)
    close()
    return WritePlan(tuple(chunks), rejected)


def _unwritable(
    message: MessageTotals, max_actions: int, counter_limit: CounterLimit, *, storable: bool = False
) -> Rejection | None:
    """Why ``message`` cannot be one direct transaction, or None (``storable``: its deltas are known storable)."""
    if 1 + len(message.totals) > max_actions:
        return Rejection(
            RejectCode.TOO_MANY_KEYS,
            f"{len(message.totals)} distinct keys in one message (at most {max_actions - 1})",
        )
    for key, counters in message.totals.items():
        if len(counters) > counter_limit(key):
            return Rejection(
                RejectCode.TOO_MANY_COUNTERS,
                f"{len(counters)} counters on {item_label(key)!r} in one message: more than one ADD "
                f"holds ({counter_limit(key)}) and a transaction holds one ADD per item",
            )
    return None if storable else _unstorable(message)


def _sums_storable(messages: Iterable[MessageTotals]) -> bool:
    """Whether every sum of these messages' deltas is storable, known without taking one: all are ints, and the
    largest magnitude of each message added up stays under 38 digits (so any sum does, whatever the signs).

    One pass of comparisons over the deltas, where cutting on ``_fits`` keeps the sums and checks each: counts of
    events never come near 38 digits, so the exact check is left for batches that do.
    """
    bound = 0
    for message in messages:
        largest = 0
        for counters in message.totals.values():
            for delta in counters.values():
                if type(delta) is not int:
                    return False
                if delta > largest:
                    largest = delta
                elif -delta > largest:
                    largest = -delta
        bound += largest
        if bound >= INT_STORABLE_BELOW:
            return False
    return True


def _fits(sums: Mapping[ItemKey, Mapping[str, Number]], totals: Totals) -> bool:
    for key, counters in totals.items():
        into = sums.get(key)
        if into is None:
            continue
        for name, delta in counters.items():
            previous = into.get(name)
            if previous is None:
                continue
            if (
                type(previous) is int
                and type(delta) is int
                and -INT_STORABLE_BELOW < previous + delta < INT_STORABLE_BELOW
            ):
                continue  # the common case, judged without a call: two ints summing to 38 digits at most
            if storage_problem(add(previous, delta)) is not None:
                return False
    return True


def _within_counter_limit(
    sums: Mapping[ItemKey, Mapping[str, Number]], totals: Totals, counter_limit: CounterLimit
) -> bool:
    """Whether adding ``totals`` keeps every item's ADD within ``counter_limit`` counters."""
    for key, counters in totals.items():
        into = sums.get(key)
        if into is None:
            continue
        limit = counter_limit(key)
        # The union is never larger than both together: it is only built when that could pass the limit.
        if len(into) + len(counters) > limit and len(into.keys() | counters.keys()) > limit:
            return False
    return True


def _chunk(members: Sequence[MessageTotals], sums: Totals) -> Chunk:
    return Chunk(tuple(members), nonzero_increments(sums))


# ------------------------------------------------------------------------------------------------------
# Whole-batch planning: direct transactions where they are cheapest, the commit journal elsewhere.

MAX_JOURNAL_CHUNK_KEYS = 98
"""ADDs per journal apply transaction: 100 actions less the chunk's applied-record and a header update."""
MAX_JOURNAL_PAGE_BYTES = 300_000
"""Encoded increments per journal page: well inside DynamoDB's 400 KB item limit."""


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """How a batch is written: independent direct transactions, and units that go through the journal.

    Messages are grouped into units whose keys no other unit touches (connected components of the
    message-key graph). A unit small enough for one transaction is packed with other small units into
    direct transactions; a larger unit goes through the commit journal (one ADD per key for the whole
    unit) unless splitting it into direct transactions writes no more items than the journal would.
    """

    direct: tuple[Chunk, ...]
    journals: tuple[tuple[MessageTotals, ...], ...]
    rejected: Mapping[str, Rejection] = field(default_factory=dict)
    journal_prices: tuple[JournalPrice | None, ...] = ()
    """For each journal unit, in order, what the planner priced it by when it chose the fenced journal for it by price
    (``None``: forced, or chosen by actions; empty: none priced)."""

    def priced_journals(self) -> Iterator[tuple[tuple[MessageTotals, ...], JournalPrice | None]]:
        """Each journal unit with what the planner priced it by, if it did."""
        return zip(self.journals, self.journal_prices or (None,) * len(self.journals), strict=True)


@dataclass(frozen=True, slots=True)
class JournalPrice:
    """What a journal unit was priced by as a fenced journal batch (``fenced_price``): its increments
    (``unit_increments``), its apply chunks, one journal page each (``plan_apply_chunks``), and each page's stored size
    (the ``page_bytes`` it was priced with). A price of the unit as planned reads them here: ``tally plan`` bills every
    batch it simulates, and computing them again was a third of its time."""

    increments: Mapping[ItemKey, Mapping[str, Number]]
    pages: tuple[Totals, ...]
    page_sizes: tuple[int, ...]


def plan_batch(
    messages: Sequence[MessageTotals],
    max_actions: int = TRANSACT_MAX_ACTIONS,
    replaces: Mapping[str, str] | None = None,
    *,
    allow_journal: bool = True,
    counter_limit: CounterLimit = no_counter_limit,
    bounded: Callable[[ItemKey], bool] | None = None,
    fenced_apply: bool = False,
    page_bytes: PageBytes = planner_page_bytes,
) -> BatchPlan:
    """Plan a batch of distinct messages; ``replaces`` names those whose marker names an aborted batch.

    (Such a message's marker can only be replaced on the condition, in the same transaction, that its batch
    is aborted: a journal claim does that, and so does a direct transaction that carries the check.)
    ``allow_journal=False`` gives the chunked plan alone (for comparison: every unit split into direct
    transactions, and a message with more keys than a transaction holds, or more counters on one item
    than one ADD holds, rejected). A unit whose counters on some item need more than one ADD
    (``counter_limit``) cannot be one direct transaction: it is split, or goes through the journal.

    A message that touches a ``bounded`` item (``tally.core.bounds``) is **pinned**: it only ever travels
    in a direct transaction, which carries its bound conditions (a journal chunk applied after the commit
    cannot: a committed chunk must apply). Pinned messages are planned apart from the others: a unit is a
    grouping that saves cost (a shared key or block written once), so a message that must go direct never
    drags its unit's other messages off the journal (a message of more than 99 items would then be refused
    for a size the journal holds), and a message that must go to the journal never drags a pinned one
    into it (its ADDs would go unconditioned). A pinned message whose marker names an aborted batch is
    written alone, in a direct transaction that replaces that marker, in its place among its component's (a bounded
    counter's steps are judged in their source order, ``_place_in_order``). So:

    - a bounded item travels only in a direct transaction (``BatchPlan.direct``), never in a journal unit;
    - a message is refused for its size only when it cannot fit the one path it may take (pinned: one
      transaction; any other: the journal, which holds any size);
    - sharing a block marker item or a key with another message may save an action, never changes that.

    ``fenced_apply`` (the deployment's ``FencedApply``): journal units are applied by fenced single-item writes at 1
    write unit per KB of each item, instead of chunk transactions at 2. Then the planner chooses each unfixed unit's
    path by price (``tally.core.write_cost``, the figures ``tally plan`` bills by: write units, and the fenced path's
    read of each item at a fifth of a write unit), pages priced by ``page_bytes`` (the store's encoding), every item
    priced under 1 KB: a unit too large for one transaction goes where it costs less, and the units small enough for
    one (none of them pinned, forced or operator) go together as one journal unit when that costs less than their
    direct transactions (``_route_small``).
    Off, the journal's apply chunks are transactions too, and the choice counts actions, as it always has.
    """
    replaced = replaces if replaces is not None else {}
    parts = _PlanParts()
    rejected, small = parts.rejected, parts.small
    pinned: list[MessageTotals] = []
    free: list[MessageTotals] = []
    # One pass over the batch's deltas proves, for nearly every batch, that no message nor any sum of them leaves the
    # Number range: then no message is checked alone and no component is cut for its sums.
    storable = _sums_storable(messages)
    for message in messages:
        problem = None if storable else _unstorable(message)
        if problem is not None:
            rejected[message.message_id] = problem
        elif bounded is not None and _touches((message,), bounded):
            pinned.append(message)
        else:
            free.append(message)
    for component in _components(pinned, by_marker=True):
        units = [component] if storable else _storable_units([component])
        if (
            len(units) == 1
            and not any(message.message_id in replaced for message in component)
            and _action_count(component) <= max_actions
            and _one_add_per_item(component, counter_limit)
        ):
            small.append(component)
        else:
            _place_in_order(component, replaced, max_actions, counter_limit, into=parts)
    fenced_pages = page_bytes if fenced_apply and allow_journal else None
    fenceable: list[tuple[MessageTotals, ...]] = []
    components = _components(free, by_marker=True)
    for unit in components if storable else _storable_units(components):
        forced = any(message.message_id in replaced for message in unit)
        if fenced_pages is not None and not forced and _fits_one_transaction(unit, max_actions, counter_limit):
            (small if any(message.is_operator for message in unit) else fenceable).append(unit)
            continue
        _place_unit(
            unit,
            max_actions,
            counter_limit,
            forced=forced,
            direct_only=not allow_journal,
            fenced_pages=fenced_pages,
            into=parts,
        )
    if fenced_pages is not None:
        _route_small(fenceable, counter_limit, fenced_pages, into=parts)
    return parts.plan(max_actions)


@dataclass(slots=True)
class _PlanParts:
    """A plan as it is put together: units to pack together, direct transactions, journal units, refusals."""

    small: list[tuple[MessageTotals, ...]] = field(default_factory=list)
    direct: list[Chunk] = field(default_factory=list)
    journals: list[tuple[MessageTotals, ...]] = field(default_factory=list)
    rejected: dict[str, Rejection] = field(default_factory=dict)
    journal_prices: list[JournalPrice | None] = field(default_factory=list)

    def journal(self, unit: tuple[MessageTotals, ...], price: JournalPrice | None = None) -> None:
        """Send ``unit`` through the journal (``price``: what it was priced by as a fenced journal batch)."""
        self.journals.append(unit)
        self.journal_prices.append(price)

    def plan(self, max_actions: int) -> BatchPlan:
        """The plan: the direct transactions, then the small units packed into as few as hold them."""
        return BatchPlan(
            (*self.direct, *_pack_small_units(self.small, max_actions)),
            tuple(self.journals),
            self.rejected,
            tuple(self.journal_prices) if any(self.journal_prices) else (),
        )


def _place_unit(
    unit: tuple[MessageTotals, ...],
    max_actions: int,
    counter_limit: CounterLimit,
    *,
    forced: bool,
    direct_only: bool,
    fenced_pages: PageBytes | None = None,
    into: _PlanParts,
) -> None:
    """Put a unit on its path: packed with other small units when it fits one transaction, else split into
    direct transactions or claimed by the journal, whichever costs less (``forced``: the journal;
    ``direct_only``: never the journal, its messages too large for a transaction refused). The cost is the
    price (``fenced_price``) when the journal is fenced (``fenced_pages``: how its pages are priced) and no operator
    message is in the unit (their paths stay as they were), else actions."""
    if not forced and _fits_one_transaction(unit, max_actions, counter_limit):
        into.small.append(unit)
        return
    if forced:
        into.journal(unit)
        return
    fenced = (
        None
        if direct_only or fenced_pages is None or any(message.is_operator for message in unit)
        else _fenced_price_and_least_direct(unit, counter_limit, fenced_pages)
    )
    if fenced is not None and fenced[0] < fenced[1]:
        # Cheaper than any split could be: the journal, without cutting the unit into transactions to price them
        # (for a packed batch of 700 messages, that cut was two fifths of the planner's time).
        into.journal(unit, fenced[2])
        return
    split = plan_transactions(unit, max_actions, counter_limit)
    if direct_only:
        into.direct.extend(split.chunks)
        into.rejected.update(split.rejected)
        return
    if split.rejected:
        journal = True
    elif fenced is not None:
        journal = fenced[0] < sum(_direct_write_units(chunk) for chunk in split.chunks)
    else:
        markers = _marker_count(unit)
        keys = _action_count(unit) - markers
        direct_cost = sum(chunk.action_count for chunk in split.chunks)
        journal = direct_cost > markers + keys + journal_overhead(markers, keys)
    if journal:
        into.journal(unit, None if fenced is None else fenced[2])
    else:
        into.direct.extend(split.chunks)


def _fits_one_transaction(unit: Sequence[MessageTotals], max_actions: int, counter_limit: CounterLimit) -> bool:
    return _action_count(unit) <= max_actions and _one_add_per_item(unit, counter_limit)


def _route_small(
    units: Sequence[tuple[MessageTotals, ...]],
    counter_limit: CounterLimit,
    page_bytes: PageBytes,
    *,
    into: _PlanParts,
) -> None:
    """Units that each fit one transaction, none pinned, forced or carrying an operator message: packed into
    direct transactions (``_pack_small_units``), or together one fenced journal unit when that costs less
    (``fenced_price``: write units, and the fenced path's strong read of each item at a fifth of a write unit).
    Each item costs 2 units in a transaction and 1 in a fenced write plus its read, and the journal adds its
    header's writes and its pages, so it wins from 7 items under 1 KB with a page under 1 KB on; a batch of a
    few messages stays direct. Measured (``python -m bench.fenced_apply --sweep``, single events on 1,000 Zipf
    keys): by write units alone the crossover was 6 records, and 8 records wrote 7% fewer units, 16 22%, 100 33%
    (``docs/journal.md``, "Small batches through the fenced path", also on the reads)."""
    if not units:
        return
    merged = tuple(message for unit in units for message in unit)
    each = [unit_increments(unit) for unit in units]
    direct = sum(
        direct_write_units(_marker_count(unit), [1] * len(increments))
        for unit, increments in zip(units, each, strict=True)
    )
    # Units that share no item: the merged unit's increments are theirs side by side, in the order its messages
    # reach them (a unit cut for its sums, ``_storable_units``, may share an item with another: then summed again).
    union: dict[ItemKey, Mapping[str, Number]] = {}
    for increments in each:
        union.update(increments)
    shared = len(union) != sum(len(increments) for increments in each)
    price, priced = _priced(merged, counter_limit, page_bytes, unit_increments(merged) if shared else union)
    if price < direct:
        into.journal(merged, priced)
    else:
        into.small.extend(units)


def fenced_price(
    unit: Sequence[MessageTotals],
    counter_limit: CounterLimit,
    page_bytes: PageBytes,
    increments: Mapping[ItemKey, Mapping[str, Number]] | None = None,
) -> Fraction:
    """The price of ``unit`` as one fenced journal batch, in write units (``fenced_journal_price``), every item
    priced under 1 KB (1 unit a write, 1 read unit its read); ``increments``: ``unit_increments(unit)``, if known."""
    return _priced(unit, counter_limit, page_bytes, unit_increments(unit) if increments is None else increments)[0]


def _priced(
    unit: Sequence[MessageTotals],
    counter_limit: CounterLimit,
    page_bytes: PageBytes,
    increments: Mapping[ItemKey, Mapping[str, Number]],
) -> tuple[Fraction, JournalPrice]:
    """``fenced_price``, with what it priced the unit by."""
    pages = plan_apply_chunks(increments, counter_limit=counter_limit)
    sizes = tuple(page_bytes(page) for page in pages)
    writes = sum(len(page) for page in pages)  # an item cut into parts takes one fenced write per part
    price = fenced_journal_price(_marker_count(unit), [1] * writes, sizes, writes)
    return price, JournalPrice(increments, pages, sizes)


def least_direct_write_units(unit: Sequence[MessageTotals], increments: Mapping[ItemKey, object]) -> int:
    """The fewest write units any split of ``unit`` into direct transactions writes: each of its marker items once,
    and each item of ``increments`` (its nonzero totals) once. A split writes each marker item in at least one chunk
    (a block of numbered ids shared by chunks, in each of them), and an item whose total over the unit is not zero in
    at least one chunk (the chunks' sums add up to that total); ``direct_write_units`` adds up linearly."""
    return direct_write_units(_marker_count(unit), [1] * len(increments))


def _fenced_price_and_least_direct(
    unit: Sequence[MessageTotals], counter_limit: CounterLimit, page_bytes: PageBytes
) -> tuple[Fraction, int, JournalPrice]:
    increments = unit_increments(unit)
    price, priced = _priced(unit, counter_limit, page_bytes, increments)
    return price, least_direct_write_units(unit, increments), priced


def unit_increments(unit: Sequence[MessageTotals]) -> dict[ItemKey, Mapping[str, Number]]:
    """What a journal unit writes: its messages' deltas summed per item, counters netting to zero dropped (the planner
    prices it, the commit protocol applies it, the cost model bills it)."""
    return nonzero_increments(merge_totals(message.totals for message in unit))


def _direct_write_units(chunk: Chunk) -> int:
    return direct_write_units(chunk.marker_items, [1] * len(chunk.increments))


def plan_price(
    plan: BatchPlan, *, counter_limit: CounterLimit = no_counter_limit, page_bytes: PageBytes = planner_page_bytes
) -> Fraction:
    """The price of ``plan`` in write units with its journal units fenced (their reads at a fifth of a unit), every
    item priced under 1 KB: the figure the planner minimises when the journal is fenced (crossings and aborted
    batches' checks left out)."""
    return sum(_direct_write_units(chunk) for chunk in plan.direct) + sum(
        (fenced_price(unit, counter_limit, page_bytes) for unit in plan.journals), Fraction(0)
    )


def _place_in_order(
    component: Sequence[MessageTotals],
    replaced: Mapping[str, str],
    max_actions: int,
    counter_limit: CounterLimit,
    *,
    into: _PlanParts,
) -> None:
    """Write a pinned component in direct transactions one after the other, in its order (a bounded counter's steps
    are judged in their source order): runs of messages packed as they fit (cut where a sum would leave the Number
    range), and each message replacing an aborted batch's marker alone, its transaction checking that batch."""
    run: list[MessageTotals] = []

    def write_run() -> None:
        for unit in _storable_units([tuple(run)]) if run else []:
            split = plan_transactions(unit, max_actions, counter_limit)
            into.direct.extend(split.chunks)
            into.rejected.update({mid: _pinned(rejection) for mid, rejection in split.rejected.items()})
        run.clear()

    for message in component:
        batch = replaced.get(message.message_id)
        if batch is None:
            run.append(message)
            continue
        write_run()
        rejection = _unwritable(message, max_actions - 1, counter_limit)
        if rejection is not None:
            into.rejected[message.message_id] = _pinned(rejection)
        else:
            into.direct.append(Chunk((message,), nonzero_increments(message.totals), {message.message_id: batch}))
    write_run()


def _pinned(rejection: Rejection) -> Rejection:
    """Say why a message on a bounded counter is refused for a size the journal would hold."""
    if rejection.code not in (RejectCode.TOO_MANY_KEYS, RejectCode.TOO_MANY_COUNTERS):
        return rejection
    why = "it steps a bounded counter, whose condition only a single transaction carries"
    return Rejection(rejection.code, f"{rejection.detail}; {why}")


def item_disjoint_lanes(chunks: Sequence[Chunk]) -> list[list[int]]:
    """Chunk indices grouped so that no two groups write a common item, each group in plan order.

    Groups may be written at the same time; a group's chunks must go one after the other. The chunks of one
    unit split into several transactions share its keys (and block marker items): on AWS two transactions in
    flight on one item conflict, so they share a lane.
    """
    lanes: list[tuple[set[Hashable], list[int]]] = []
    for index, chunk in enumerate(chunks):
        items = chunk.items
        touching = [lane for lane in lanes if not lane[0].isdisjoint(items)]
        merged: tuple[set[Hashable], list[int]] = (set(items), [index])
        for lane in touching:
            lanes.remove(lane)
            merged[0].update(lane[0])
            merged[1].extend(lane[1])
        merged[1].sort()
        lanes.append(merged)
    return sorted((indices for _, indices in lanes), key=lambda indices: indices[0])


def journal_overhead(markers: int, keys: int) -> int:
    """Extra item writes of the journal over the floor (marker items + ADDs), in ~1 KB write units.

    Header, commit and finish updates, one applied-record per apply chunk, a header check per extra
    claim transaction, and the pages. Only used to choose a path: both are exactly-once.
    """
    claim_transactions = -(-(markers + 1) // (TRANSACT_MAX_ACTIONS - 1))
    add_chunks = -(-keys // MAX_JOURNAL_CHUNK_KEYS)
    return 3 + claim_transactions + 2 * add_chunks


def transaction_actions(chunk: Chunk) -> int:
    """The most actions ``chunk``'s transaction takes before its notifications: one per marker item, per aborted
    batch its claims replace, and per item its messages add to, set or stamp (an item whose steps net to zero
    and carry no condition is not written: an upper bound)."""
    items: set[ItemKey] = set()
    for message in chunk.messages:
        items.update(message.totals)
        items.update(message.sets)
        if message.stamp is not None:
            items.add(message.stamp.key)
    return chunk.marker_items + len(set(chunk.replaces.values())) + len(items)


MAX_CROSSING_PAGE_BYTES = 200_000
"""Estimated notification bytes per crossing page: its apply transaction writes each as an item (about 2.4 KB at
most: a 2,000-byte key), well inside DynamoDB's 4 MB per transaction and the page's 400 KB item."""


def crossing_pages(
    crossings: Sequence[Crossing], max_crossings: int, max_bytes: int = MAX_CROSSING_PAGE_BYTES
) -> tuple[CrossingPage, ...]:
    """Cut ``crossings`` (in order) into journal pages of at most ``max_crossings`` each (an apply transaction
    writes its applied-record beside them) and about ``max_bytes`` of notifications."""
    pages: list[CrossingPage] = []
    current: list[Crossing] = []
    size = 0
    for crossing in crossings:
        entry = sum(len(text.encode("utf-8")) for text in (crossing.key, crossing.counter, crossing.message_id)) + 200
        if current and (len(current) >= max_crossings or size + entry > max_bytes):
            pages.append(CrossingPage(tuple(current)))
            current, size = [], 0
        current.append(crossing)
        size += entry
    if current:
        pages.append(CrossingPage(tuple(current)))
    return tuple(pages)


def plan_apply_chunks(
    increments: Totals,
    max_keys: int = MAX_JOURNAL_CHUNK_KEYS,
    max_bytes: int = MAX_JOURNAL_PAGE_BYTES,
    *,
    counter_limit: CounterLimit = no_counter_limit,
) -> tuple[Totals, ...]:
    """Split a unit's increments into apply chunks (one transaction and one journal page each).

    An item with more counters than one ADD holds is cut into parts of at most ``counter_limit`` counters,
    each in a different chunk (a transaction holds one action per item); every chunk is applied exactly
    once, so the item gets each of its counters once. Items keep their order; a part goes into the first
    chunk after its item's previous part that has room.
    """
    chunks: list[dict[ItemKey, Mapping[str, Number]]] = []
    sizes: list[int] = []
    first_open = 0  # every chunk before it is full
    for key, counters in increments.items():
        position = first_open
        for part in counter_parts(counters, counter_limit(key)):
            entry = page_entry_bytes(key, part)
            while position < len(chunks) and (
                len(chunks[position]) >= max_keys or (chunks[position] and sizes[position] + entry > max_bytes)
            ):
                position += 1
            if position == len(chunks):
                chunks.append({})
                sizes.append(0)
            chunks[position][key] = part
            sizes[position] += entry
            position += 1
        while first_open < len(chunks) and len(chunks[first_open]) >= max_keys:
            first_open += 1
    return tuple(chunks)


def counter_parts(counters: Mapping[str, Number], limit: int) -> list[Mapping[str, Number]]:
    if len(counters) <= limit:
        return [counters]
    names = list(counters)
    return [{name: counters[name] for name in names[start : start + limit]} for start in range(0, len(names), limit)]


def nonzero_increments(totals: Totals) -> dict[ItemKey, Mapping[str, Number]]:
    """Drop counters that net to zero, and keys left with none: they would write nothing."""
    return {
        key: nonzero
        for key, counters in totals.items()
        if (nonzero := {name: delta for name, delta in counters.items() if delta})
    }


def _unstorable(message: MessageTotals) -> Rejection | None:
    for key, counters in message.totals.items():
        for name, total in counters.items():
            if type(total) is int and -INT_STORABLE_BELOW < total < INT_STORABLE_BELOW:
                continue  # most deltas: a small int is storable, no call needed to say so
            problem = storage_problem(total)
            if problem is not None:
                detail = f"net delta of {item_label(key)!r}/{name!r} in this message: {problem}"
                return Rejection(RejectCode.NUMBER_OUT_OF_RANGE, detail)
    return None


def _nodes(message: MessageTotals, *, by_marker: bool) -> Iterable[Hashable]:
    """What links ``message`` to others: its keys, and (``by_marker``) its marker item."""
    nodes: list[Hashable] = [("key", key) for key in message.totals]
    if by_marker:
        nodes.append(("marker", marker_item(message.message_id)))
    return nodes


def _components(messages: Sequence[MessageTotals], *, by_marker: bool = False) -> list[tuple[MessageTotals, ...]]:
    """Messages grouped so that no two groups share a key (union-find over keys), in batch order.

    ``by_marker``: nor a marker item, so that numbered messages of one block land in one unit and their
    markers are written by one action (a block split between units would be written once per unit).
    """
    parent: dict[Hashable, Hashable] = {}

    def find(node: Hashable) -> Hashable:
        root = node
        while parent[root] != root:
            root = parent[root]
        while parent[node] != root:
            parent[node], node = root, parent[node]
        return root

    firsts: list[Hashable | None] = []
    for message in messages:
        nodes = iter(_nodes(message, by_marker=by_marker))
        first = next(nodes, None)
        firsts.append(first)
        if first is None:
            continue
        parent.setdefault(first, first)
        root = find(first)  # stays the root: each union hangs another root under it
        for node in nodes:
            parent.setdefault(node, node)
            parent[find(node)] = root
    groups: dict[Hashable, list[MessageTotals]] = {}
    alone: list[MessageTotals] = []
    for message, first in zip(messages, firsts, strict=True):
        if first is None:
            alone.append(message)  # every delta netted to zero: only a marker to write
        else:
            groups.setdefault(find(first), []).append(message)
    return [tuple(group) for group in groups.values()] + [(message,) for message in alone]


def _storable_units(components: Sequence[tuple[MessageTotals, ...]]) -> list[tuple[MessageTotals, ...]]:
    """Split a component where its per-key sums would leave the Number range (rare: 38-digit sums)."""
    units: list[tuple[MessageTotals, ...]] = []
    for component in components:
        if _sums_storable(component):
            units.append(component)
            continue
        current: list[MessageTotals] = []
        sums: dict[ItemKey, dict[str, Number]] = {}
        for message in component:
            if current and not _fits(sums, message.totals):
                units.append(tuple(current))
                current, sums = [], {}
            current.append(message)
            add_into(sums, message.totals)
        if current:
            units.append(tuple(current))
    return units


def _one_add_per_item(unit: Sequence[MessageTotals], counter_limit: CounterLimit) -> bool:
    """Whether every item's counters, over the whole unit, fit one ADD."""
    names: dict[ItemKey, set[str]] = {}
    for message in unit:
        for key, counters in message.totals.items():
            seen = names.setdefault(key, set())
            seen.update(counters)
            if len(seen) > counter_limit(key):
                return False
    return True


def _touches(unit: Sequence[MessageTotals], bounded: Callable[[ItemKey], bool]) -> bool:
    return any(bounded(item) for message in unit for item in message.totals)


def split_refused(
    messages: Sequence[MessageTotals], refused_items: Collection[ItemKey]
) -> tuple[list[MessageTotals], list[MessageTotals]]:
    """After a bound refused a transaction: (the messages to apply one by one, in order; the others).

    The first are the connected components (shared keys) of the messages that touch a refused item, so the
    order of every item they touch is kept; the others share no key with them and can be written together
    again (if a bound refuses them too, they are split in turn).
    """
    suspects: list[MessageTotals] = []
    others: list[MessageTotals] = []
    for component in _components(messages):
        if any(item in refused_items for message in component for item in message.totals):
            suspects.extend(component)
        else:
            others.extend(component)
    order = {message.message_id: position for position, message in enumerate(messages)}
    suspects.sort(key=lambda message: order[message.message_id])
    return suspects, others


def _marker_count(messages: Iterable[MessageTotals]) -> int:
    """Distinct marker items of ``messages``: the transaction actions their markers take."""
    return len({marker_item(message.message_id) for message in messages})


def _action_count(unit: Sequence[MessageTotals]) -> int:
    return _marker_count(unit) + len({key for message in unit for key in message.totals})


def _pack_small_units(units: Sequence[tuple[MessageTotals, ...]], max_actions: int) -> list[Chunk]:
    """First-fit decreasing: small units with disjoint keys share transactions, each key written once.

    Units share no marker item either (``_components(by_marker=True)``) unless a component was cut for its
    sums (``_storable_units``): a bin counts its distinct marker items, so such a pair still fits exactly. Parts of
    a component cut for its sums share keys: they never share a bin (their sums together are what DynamoDB
    would refuse).
    """
    sized = sorted(
        ((_action_count(unit), index, unit) for index, unit in enumerate(units)), key=lambda item: (-item[0], item[1])
    )
    bins: list[tuple[set[ItemKey], set[str], list[MessageTotals]]] = []
    for _, _, unit in sized:
        markers = {marker_item(message.message_id) for message in unit}
        keys = {key for message in unit for key in message.totals}
        for used_keys, used_markers, members in bins:
            if used_keys.isdisjoint(keys) and len(used_keys) + len(keys) + len(used_markers | markers) <= max_actions:
                members.extend(unit)
                used_keys.update(keys)
                used_markers.update(markers)
                break
        else:
            bins.append((keys, markers, list(unit)))
    chunks = []
    for _, _, members in bins:
        sums: dict[ItemKey, dict[str, Number]] = {}
        for message in members:
            add_into(sums, message.totals)
        chunks.append(_chunk(members, sums))
    return chunks
