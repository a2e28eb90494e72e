"""Pre-aggregation: collapse a batch's messages into net deltas per (key, counter).

Pure throughout: ``deduplicate`` keeps the first message of each id within a batch (a producer
re-send or an at-least-once redelivery landing in the same batch) and tells a copy with other content
(an id reused for different events) from a duplicate, and ``message_totals`` nets each message's events
per key and counter, because the message, not the event, is the unit that is marked applied, and takes
its content digest for its marker (``tally.core.digest``); ``aggregate_batch`` does that for a batch's
distinct messages and spreads hot keys over their shards. Sums are exact (see ``tally.core.numbers``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import replace

from tally.core.digest import content_digest
from tally.core.items import ALL_TIME, WINDOW_COUNTER_MARK, CounterItem, ItemKey, item_parts, window_counter
from tally.core.ledger import content_conflict
from tally.core.model import IdConflict
from tally.core.numbers import Number, add
from tally.core.resets import OperatorKind, operator_stamp, reset_items
from tally.core.sharding import assign_shards
from tally.core.views import NO_VIEWS

if TYPE_CHECKING:
    from collections.abc import Callable

    from tally.core.model import Message, Rejection
    from tally.core.resets import OperatorStamp
    from tally.core.sharding import HotKeys
    from tally.core.views import CounterViews
    from tally.core.windows import WindowSpec

Totals = Mapping[ItemKey, Mapping[str, Number]]
"""Net deltas: counter item (a key's all-time item, or a window or shard of it) -> counter name -> delta."""


class MessageTotals(msgspec.Struct, frozen=True, gc=False):
    """The net effect of one message: what applying it adds, and how many events it carried."""

    message_id: str
    totals: Totals
    event_count: int
    late_events: int = 0
    """Events that were not written to some window because that window's retention had passed."""
    digest: bytes = b""
    """The message's content digest (``tally.core.digest``), stored on its marker; empty: none."""
    sets: Totals = msgspec.field(default_factory=dict)
    """A reset's writes: item -> counter -> the value it is set to (``tally.core.resets.reset_items``)."""
    stamp: OperatorStamp | None = None
    """A reset's or correction's record on the key's all-time item; None for every other message."""
    placed_ms: int | None = None
    """The receive time that placed an event without ``ts`` in a window (``received_ms``), kept on the message's
    marker: a later delivery that archives the message (a repair after a crash, a producer's re-send) is received
    at another time, and the recount needs this one. None when no window owes anything to it."""

    @property
    def is_operator(self) -> bool:
        """A reset or a correction: ordered against the batch's other messages (``tally.core.resets``)."""
        return self.stamp is not None


@dataclass(frozen=True, slots=True)
class Deduplicated:
    """The distinct messages of a batch (first occurrence wins) and what became of the other copies."""

    unique: tuple[int, ...]
    """Positions (in the input) of the first message of each id, in input order."""
    duplicate_of: Mapping[int, int]
    """Position of each repeat with the same content -> position of the first message with its id."""
    conflict_of: Mapping[int, int] = field(default_factory=dict)
    """Position of each repeat with *other* content (an id reused) -> position of the first message.

    The first copy is the one that goes on to be applied: in a Kinesis shard it is the one the stream
    accepted first, and on SQS (no order) one copy is as good as another, as long as exactly one counts
    and every other content is dead-lettered. Whether a conflicting copy is dead-lettered waits for the
    first copy's outcome (``BatchPipeline``): it is a duplicate after all if the id turns out to count its
    content already (``IdConflict.counted``).
    """


def deduplicate(messages: Sequence[Message]) -> Deduplicated:
    """Find the distinct message ids of a batch, keeping the first occurrence of each.

    Contents are compared (``content_digest``) only for ids that repeat, so a batch without repeats costs
    no digest here.
    """
    first_position: dict[str, int] = {}
    unique: list[int] = []
    duplicate_of: dict[int, int] = {}
    conflict_of: dict[int, int] = {}
    digests: dict[int, bytes] = {}
    for position, message in enumerate(messages):
        first = first_position.setdefault(message.message_id, position)
        if first == position:
            unique.append(position)
            continue
        first_digest = digests.get(first)
        if first_digest is None:
            first_digest = digests[first] = content_digest(messages[first])
        if content_digest(message) == first_digest:
            duplicate_of[position] = first
        else:
            conflict_of[position] = first
    return Deduplicated(tuple(unique), duplicate_of, conflict_of)


def copy_conflict(first: Message, copy: Message, first_rejection: Rejection | None) -> IdConflict | None:
    """Judge a copy of an id whose content differs from the batch's first copy, once that one is settled.

    What counts under the id is the first copy's content, unless the first copy was itself refused as an
    id conflict: then it is the content its marker names (``IdConflict.counted``), and a copy with that
    content is a duplicate after all. Any other copy is an ``id_conflict``. (A first copy left unapplied
    is not settled: its copies are redelivered with it and judged then.)
    """
    if isinstance(first_rejection, IdConflict):
        return content_conflict(first_rejection.counted, content_digest(copy), where="its marker")
    return content_conflict(content_digest(first), content_digest(copy), where="the batch's first copy of the id")


def message_totals(
    message: Message,
    windows: WindowSpec | None = None,
    received_ms: int = 0,
    now_ms: int = 0,
    views: CounterViews = NO_VIEWS,
) -> MessageTotals:
    """Net one message's events per counter item: the all-time item, and each window it counts in, of its key
    and of each of its views (``tally.core.views``: derived keys, counted exactly like the event's own).

    An event's window comes from its ``ts``, or, without one, from ``received_ms`` (when the source
    accepted the record). The digest is taken from the decoded events, so it depends on neither. Hour and
    day windows are counters of the key's own item (``window_counter``: one item written per
    key); minute windows are items of their own.
    """
    totals: dict[ItemKey, dict[str, Number]] = {}
    late = 0
    placed_ms: int | None = None
    for event in message.events:
        if event.reset is not None:
            continue  # a reset sets the all-time value only (``sets``): it adds nothing, to no window
        keys = (event.key, *views.view_keys(event.key, event.dims)) if event.dims else (event.key,)
        for key in keys:
            _add_to_item(totals, key, event.deltas)
        if windows is not None and windows.units:
            ts_ms = event.ts_ms if event.ts_ms is not None else received_ms
            spans, was_late = windows.windows_of(ts_ms, now_ms)
            late += was_late
            if event.ts_ms is None and spans:
                placed_ms = received_ms
            for unit, start in spans:
                window_id = unit.window_id(start)
                if unit.on_key_item:
                    named = {window_counter(window_id, name): delta for name, delta in event.deltas.items()}
                    for key in keys:
                        _add_to_item(totals, key, named)
                else:
                    expires_at_s = unit.expires_at_s(start)
                    for key in keys:
                        _add_to_item(totals, CounterItem(key, window_id, 0, expires_at_s), event.deltas)
    digest = content_digest(message)
    first = message.events[0] if message.events else None
    if first is not None and (first.reset is not None or first.correction):
        stamp = operator_stamp(message, received_ms, views)
        if stamp is not None:
            sets = reset_items(stamp) if stamp.kind is OperatorKind.RESET else {}
            return MessageTotals(message.message_id, totals, 1, late, digest, sets, stamp, placed_ms)
    return MessageTotals(message.message_id, totals, len(message.events), late, digest, placed_ms=placed_ms)


@dataclass(frozen=True, slots=True)
class BatchTotals:
    """A batch's distinct messages, netted: what the applier commits."""

    messages: tuple[MessageTotals, ...]
    late_events: int
    """Events left out of some window because its retention had passed."""


def aggregate_batch(
    messages: Sequence[Message],
    received_ms: Sequence[int],
    *,
    windows: WindowSpec,
    hot_keys: HotKeys,
    now_ms: int,
    choose_shard: Callable[[int], int],
    views: CounterViews = NO_VIEWS,
) -> BatchTotals:
    """Net each distinct message (``message_totals``) and move a hot key's writes onto one of its shards.

    ``received_ms[i]`` is when the source accepted ``messages[i]``; ``choose_shard(n)`` picks one of ``n``
    shards (a random draw in production). Each hot key gets one shard for the whole batch: one ADD per item.
    """
    shard_of_key: dict[str, int] = {}

    def pick(key: str, shards: int) -> int:
        return shard_of_key.setdefault(key, choose_shard(shards))

    netted: list[MessageTotals] = []
    late_events = 0
    for message, received in zip(messages, received_ms, strict=True):
        net = message_totals(message, windows, received, now_ms, views)
        late_events += net.late_events
        if hot_keys.rules:
            net = replace(net, totals=assign_shards(net.totals, hot_keys, pick))
            if net.sets and net.stamp is not None:
                net = replace(net, sets=reset_items(net.stamp, hot_keys))
        netted.append(net)
    return BatchTotals(tuple(netted), late_events)


def _add_to_item(totals: dict[ItemKey, dict[str, Number]], item: ItemKey, deltas: Mapping[str, Number]) -> None:
    if not deltas:
        return  # a gauges-only event moves no counter: no item to write for it
    counters = totals.get(item)
    if counters is None:
        totals[item] = dict(deltas)
    else:
        _add_counters(counters, deltas)


def add_into(target: dict[ItemKey, dict[str, Number]], totals: Totals) -> None:
    """Add a net-delta map into ``target`` in place (keys and counters it lacks start from zero)."""
    for key, counters in totals.items():
        into = target.get(key)
        if into is None:
            target[key] = dict(counters)
        else:
            _add_counters(into, counters)


def merge_totals(parts: Iterable[Totals]) -> dict[ItemKey, dict[str, Number]]:
    """Sum several net-delta maps into one (the batch aggregate, or one transaction's share of it)."""
    merged: dict[ItemKey, dict[str, Number]] = {}
    for part in parts:
        add_into(merged, part)
    return merged


def _add_counters(into: dict[str, Number], deltas: Mapping[str, Number]) -> None:
    for name, delta in deltas.items():
        previous = into.get(name)
        if previous is None:
            into[name] = delta
        elif type(previous) is int and type(delta) is int:
            into[name] = previous + delta  # ``add``'s int case, inlined: this loop runs once per counter
        else:
            into[name] = add(previous, delta)


def key_items_with_windows(parts: Iterable[Totals]) -> list[ItemKey]:
    """The key items (all-time, or a hot key's shard) that carry open-window counters in these totals: the
    items whose ended windows the batch then moves (``tally.store.windows``)."""
    found: dict[ItemKey, None] = {}
    for totals in parts:
        for item, counters in totals.items():
            if item_parts(item).window == ALL_TIME and any(name[:1] == WINDOW_COUNTER_MARK for name in counters):
                found[item] = None
    return list(found)
