"""One direct transaction's write, decided here: what each item gets, on which conditions, and what it records.

``plan_write`` turns a ``Chunk`` (its messages in their order, and what an earlier attempt's refused condition met)
into a ``DirectWrite`` (``tally.core.write``), which the counter store encodes as one ``TransactWriteItems`` and
decides nothing of:

- the markers: one ``Claim`` per message (a replaced marker's batch checked once per batch; when crossings spill,
  the markers name the spill's batch: ``tally.core.plan.Spill``);
- per item one ``ItemWrite``: its ADDs, with the start values of those counters that have one (a key's all-time
  item only: ``tally.core.defaults``), a reset's values and the operator's record, and its conditions: a bounded
  counter's (``tally.core.bounds.bound_checks``; never on an operator's message, which is applied as given), a
  thresholded counter's crossing-free condition (``tally.core.thresholds.crossing_free``) or, planned from values
  known, the exact one (``exact_checks``), and, when an ended window's moved part shifted those, no move since it
  was read. An item whose steps net to zero but move a conditioned counter gets its conditions alone (``-5`` then
  ``+5`` must not take a counter across a floor on the way);
- the crossings the write records, planned from the values known (``crossings``), less those a spill's pages hold.

It is pure. What it must know first it asks for (``ReadFirst``): the values of the thresholded counters a reset
sets (whether a reset crosses a level depends on the value before it: ``reset_counters``), the moves and pointers
of the key items whose ended windows a late event moves (``window_reads``, ``tally.core.moved``), and the window
items those pointers cannot say. The protocol reads them through its retry runner, as any read, and plans again
with them (``Seen``); what a key item said of its moves stays true, for the whole apply call, while its count of
moves does, which the write is conditioned on.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Protocol, TypeAlias

from tally.core.bounds import bound_checks
from tally.core.items import ALL_TIME, item_parts, split_window_counter
from tally.core.ledger import Claim
from tally.core.moved import moved_home, moved_part
from tally.core.numbers import EXACT
from tally.core.thresholds import crossing_free, crossings, exact_checks, reset_counters, window_reads, window_unit
from tally.core.write import DirectWrite, ItemWrite, MovesSeen, ReadFirst

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from tally.core.bounds import BoundCheck
    from tally.core.declarations import Declarations
    from tally.core.defaults import CounterDefaults
    from tally.core.items import ItemKey
    from tally.core.moved import MovedPointer
    from tally.core.numbers import Number
    from tally.core.plan import Chunk
    from tally.core.resets import OperatorStamp
    from tally.core.thresholds import CrossingFree, ExactCheck
    from tally.core.write import ItemRead, Seen

PartOf: TypeAlias = "Callable[[MovedPointer, Decimal | None, str, str], Decimal | None]"
"""How a window's moved part is known from its key item's pointer, read with the item's count of moves
(``tally.core.moved.moved_part``): None when the pointer cannot say, and the window item is read."""


class WritePlanner(Protocol):
    """``plan_write``, or a variant of it (the chaos run's broken ones are such variants, passed in)."""

    def __call__(self, chunk: Chunk, declared: Declarations, seen: Seen, *, now_ms: int) -> DirectWrite | ReadFirst: ...


def plan_write(
    chunk: Chunk, declared: Declarations, seen: Seen, *, now_ms: int, part_of: PartOf = moved_part
) -> DirectWrite | ReadFirst:
    """The write of ``chunk`` at the batch's clock ``now_ms``, or what it must read first (the module's docstring).

    ``seen``: what was read for it; ``part_of``: how a window's moved part is known from its key item's pointer.
    """
    thresholds, defaults = declared.thresholds, declared.defaults
    steps = [message.totals for message in chunk.messages]
    resets = reset_counters(chunk.messages, thresholds) if thresholds.rules else {}
    windows = window_reads(steps, thresholds, now_ms) if thresholds.rules else {}
    unread = [item for item in resets if item not in chunk.before and item not in seen.items]
    unread += [item for item in windows if item not in seen.key_items]
    if unread:
        return ReadFirst(tuple(dict.fromkeys(unread)))
    parts, homes = _moved_parts(windows, seen, declared, part_of)
    if homes:
        return ReadFirst(tuple(homes))
    known: dict[ItemKey, ItemRead | None] = {item: seen.items[item] for item in resets if item not in chunk.before}
    known.update(chunk.before)
    before = {item: _as_met(item, read, parts.get(item, {}), defaults) for item, read in known.items()}
    # An operator's reset or correction is applied as given: a bound does not refuse it
    # (docs/explanation/counter-patterns.md). A level's condition refuses nothing for good: a write that would
    # cross one is sent again from the value it met, recording the crossing, whoever's message made it.
    operator = any(message.stamp is not None for message in chunk.messages)
    checks = {} if operator else bound_checks(steps, declared.bounds, defaults)
    exact = exact_checks(steps, thresholds, before, defaults, parts=parts, resets=resets) if before else {}
    free = {
        item: levels
        for item, levels in crossing_free(steps, thresholds, defaults, parts=parts).items()
        if item not in exact
    }
    moves = {item: MovesSeen(seen.key_items[item].moves) for item in windows}
    spill = chunk.spill
    paged = spill.paged if spill is not None else frozenset()
    found = crossings(chunk.messages, thresholds, before, defaults, at_ms=now_ms) if before else []
    return DirectWrite(
        claims=tuple(
            Claim(message.message_id, chunk.replaces.get(message.message_id), message.digest, message.placed_ms)
            for message in chunk.messages
        ),
        items=_item_writes(chunk, defaults, checks=checks, free=free, exact=exact, moves=moves),
        at_ms=now_ms,
        crossings=tuple(crossing for crossing in found if crossing.notification_id not in paged),
        replaced=tuple(dict.fromkeys(chunk.replaces.values())),
        spill_batch=spill.batch_id if spill is not None else None,
        moved=parts,
    )


def counters_met(
    found: Mapping[ItemKey, ItemRead | None], defaults: CounterDefaults
) -> dict[ItemKey, dict[str, Decimal]]:
    """Refused items' counters as their conditions met them (``ALL_OLD``): a missing counter at its start value on
    a key's all-time item, 0 (absent) elsewhere. What a bound's refusal is judged by (``tally.core.bounds``: bounds
    are on all-time values, which no move shifts)."""
    return {item: _as_met(item, read, {}, defaults) for item, read in found.items()}


def _as_met(
    item: ItemKey, read: ItemRead | None, moved: Mapping[str, Number], defaults: CounterDefaults
) -> dict[str, Decimal]:
    """An item's counters as a write planned from ``read`` meets them: a missing counter at its start value (a key's
    all-time item only: windows count from zero), an ended window's value the key item's part plus ``moved``."""
    parts = item_parts(item)
    starts = defaults.starts(parts.key) if parts.window == ALL_TIME and parts.shard == 0 else {}
    met = {name: Decimal(start) for name, start in starts.items()}
    if read is not None:
        met.update(read.counters)
    for name, part in moved.items():
        met[name] = EXACT.add(met.get(name, Decimal(0)), Decimal(part))
    return met


def _moved_parts(
    windows: Mapping[ItemKey, Sequence[str]], seen: Seen, declared: Declarations, part_of: PartOf
) -> tuple[dict[ItemKey, dict[str, Number]], list[ItemKey]]:
    """Per key item, the moved part of each ended window counter its write moves: from the key item's pointer
    (``part_of``), else from the window item the move put it in (``moved_home``), once read; and the window
    items still to read."""
    parts: dict[ItemKey, dict[str, Number]] = {}
    homes: list[ItemKey] = []
    for item, names in windows.items():
        snapshot = seen.key_items[item]
        found = parts.setdefault(item, {})
        for name in names:
            window, counter = split_window_counter(name) or ("", name)
            unit = window_unit(window)
            part = part_of(snapshot.pointer(unit), snapshot.moves, window, counter) if unit else None
            if part is not None:
                found[name] = part
                continue
            home, there = moved_home(item_parts(item).key, window, counter, declared.windows)
            read = seen.items.get(home)
            if read is None:
                homes.append(home)
            else:
                found[name] = read.counters.get(there, Decimal(0))
    return parts, list(dict.fromkeys(homes))


def _item_writes(
    chunk: Chunk,
    defaults: CounterDefaults,
    *,
    checks: Mapping[ItemKey, tuple[BoundCheck, ...]],
    free: Mapping[ItemKey, tuple[CrossingFree, ...]],
    exact: Mapping[ItemKey, tuple[ExactCheck, ...]],
    moves: Mapping[ItemKey, MovesSeen],
) -> tuple[ItemWrite, ...]:
    """One ``ItemWrite`` per item the chunk adds to, sets or stamps, then one per item only its conditions name.

    A reset's values and an operator's record ride in their item's one action (a transaction takes one action per
    item); the record goes on the key's own all-time item (also when a hot key's correction lands on a shard)."""
    sets: dict[ItemKey, Mapping[str, Number]] = {}
    stamps: dict[ItemKey, OperatorStamp] = {}
    for message in chunk.messages:
        sets.update(message.sets)
        if message.stamp is not None:
            stamps[message.stamp.key] = message.stamp
    items = dict.fromkeys([*chunk.increments, *sets, *stamps, *checks, *free, *exact])
    return tuple(
        ItemWrite(
            item,
            adds=chunk.increments.get(item, {}),
            starts=start_values(item, chunk.increments.get(item, {}), defaults),
            sets=sets.get(item, {}),
            stamp=stamps.get(item) if isinstance(item, str) else None,
            bounds=checks.get(item, ()),
            free=free.get(item, ()),
            exact=exact.get(item, ()),
            moves=moves.get(item),
        )
        for item in items
    )


def start_values(item: ItemKey, adds: Iterable[str], defaults: CounterDefaults) -> dict[str, Number]:
    """The start values of the counters ``adds`` names, on a key's all-time item (windows count from zero)."""
    parts = item_parts(item)
    if parts.window != ALL_TIME or parts.shard != 0 or not defaults.rules:
        return {}
    starts = defaults.starts(parts.key)
    return {name: starts[name] for name in adds if name in starts}
