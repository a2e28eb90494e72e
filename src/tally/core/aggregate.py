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

from tally.core.numbers import Number, add

if TYPE_CHECKING:
    from tally.core.model import Message

Totals = Mapping[str, Mapping[str, Number]]
"""Net deltas: key -> counter name -> delta."""


@dataclass(frozen=True, slots=True)
class MessageTotals:
    """The net effect of one message: what applying it adds, and how many events it carried."""

    message_id: str
    totals: Totals
    event_count: int


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


def message_totals(message: Message) -> MessageTotals:
    """Net one message's events per key and counter."""
    totals: dict[str, dict[str, Number]] = {}
    for event in message.events:
        counters = totals.get(event.key)
        if counters is None:
            totals[event.key] = dict(event.deltas)
        else:
            _add_counters(counters, event.deltas)
    return MessageTotals(message.message_id, totals, len(message.events))


def add_into(target: dict[str, dict[str, Number]], totals: Totals) -> None:
    """Add a net-delta map into ``target`` in place (keys and counters it lacks start from zero)."""
    for key, counters in totals.items():
        into = target.get(key)
        if into is None:
            target[key] = dict(counters)
        else:
            _add_counters(into, counters)


def merge_totals(parts: Iterable[Totals]) -> dict[str, dict[str, Number]]:
    """Sum several net-delta maps into one (the batch aggregate, or one transaction's share of it)."""
    merged: dict[str, dict[str, Number]] = {}
    for part in parts:
        add_into(merged, part)
    return merged


def _add_counters(into: dict[str, Number], deltas: Mapping[str, Number]) -> None:
    for name, delta in deltas.items():
        previous = into.get(name)
        into[name] = delta if previous is None else add(previous, delta)
