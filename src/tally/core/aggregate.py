"""Pre-aggregation: collapse a batch's messages into net deltas per (key, counter).

Two steps, both pure: ``deduplicate`` keeps the first message of each id within a batch (a producer
re-send or an at-least-once redelivery landing in the same batch), and ``message_totals`` nets each
message's events per key and counter, because the message, not the event, is the unit that is marked
applied. Sums are exact (see ``tally.core.numbers``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from tally.core.items import CounterItem, ItemKey
from tally.core.numbers import Number, add

if TYPE_CHECKING:
    from tally.core.model import Message
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


@dataclass(frozen=True, slots=True)
class Deduplicated:
    """The distinct messages of a batch (first occurrence wins) and which positions repeated an id."""

    unique: tuple[int, ...]
    """Positions (in the input) of the first message of each id, in input order."""
    duplicate_of: Mapping[int, int]
    """Position of each repeated message -> position of the first message with the same id."""


def deduplicate(messages: Sequence[Message]) -> Deduplicated:
    """Find the distinct message ids of a batch, keeping the first occurrence of each."""
    first_position: dict[str, int] = {}
    unique: list[int] = []
    duplicate_of: dict[int, int] = {}
    for position, message in enumerate(messages):
        first = first_position.setdefault(message.message_id, position)
        if first == position:
            unique.append(position)
        else:
            duplicate_of[position] = first
    return Deduplicated(tuple(unique), duplicate_of)


def message_totals(
    message: Message, windows: WindowSpec | None = None, received_ms: int = 0, now_ms: int = 0
) -> MessageTotals:
    """Net one message's events per counter item: the all-time item, and each window it counts in.

    An event's window comes from its ``ts``, or, without one, from ``received_ms`` (when the source
    accepted the record).
    """
    totals: dict[ItemKey, dict[str, Number]] = {}
    late = 0
    for event in message.events:
        _add_to_item(totals, event.key, event.deltas)
        if windows is not None and windows.units:
            ts_ms = event.ts_ms if event.ts_ms is not None else received_ms
            spans, was_late = windows.windows_of(ts_ms, now_ms)
            late += was_late
            for unit, start in spans:
                window = CounterItem(event.key, unit.window_id(start), 0, unit.expires_at_s(start))
                _add_to_item(totals, window, event.deltas)
    return MessageTotals(message.message_id, totals, len(message.events), late)


def _add_to_item(totals: dict[ItemKey, dict[str, Number]], item: ItemKey, deltas: Mapping[str, Number]) -> None:
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
