"""Gauges next to counters: ``max``, ``min`` and ``latest`` per key and gauge name.

A gauge keeps one reading out of many, so applying a reading twice changes nothing: gauges are
idempotent by nature and need no marker of their own. What they need is an order that every invocation
agrees on, whatever the duplication, order and batching of the messages:

- ``max`` / ``min``: the numeric order (exact: ints and Decimals compare by value);
- ``latest``: ``latest_order``, the event's ``ts`` first, then a digest of the message id and the value,
  so two readings at the same millisecond are ordered the same way everywhere (the decoder requires a
  ``ts`` for ``latest``: a receive time would differ between deliveries).

``batch_gauges`` pre-aggregates a batch to one reading per (key, kind, name): the store then writes each
key's gauges with one conditional update (``tally.store.gauges``) **after** the counters' commit, and only
for messages whose counters are applied (now or before, by their marker), so a dead-lettered message never
moves a gauge and a crash between the commit and the gauge write is repaired by the redelivery, which finds
the marker and writes the gauges again.
"""

from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b
from typing import TYPE_CHECKING, Final, TypeAlias

import msgspec

from tally.core.digest import canonical_number
from tally.core.model import GaugeKind

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from tally.core.model import Message
    from tally.core.numbers import Number

GaugeSlot: TypeAlias = tuple[GaugeKind, str]
"""(kind, gauge name): one stored gauge of a key."""

_ORDER_DIGEST_BYTES: Final = 16
_encode: Final = msgspec.msgpack.Encoder().encode


@dataclass(frozen=True, slots=True)
class GaugeValue:
    """A gauge's value and, for ``latest``, its place in time (``latest_order``; empty for max and min)."""

    value: Number | str
    order: bytes = b""


def latest_order(ts_ms: int, message_id: str, value: Number | str) -> bytes:
    """The total order of ``latest`` readings: 8 bytes of ``ts`` (big-endian), then 16 bytes of digest.

    Compared as unsigned bytes, which is how both Python and DynamoDB compare Binary values, so the
    store's condition (``stored order < new order``) and this module agree.
    """
    tie = (message_id, True, value) if isinstance(value, str) else (message_id, False, canonical_number(value))
    return ts_ms.to_bytes(8, "big") + blake2b(_encode(tie), digest_size=_ORDER_DIGEST_BYTES).digest()


def supersedes(kind: GaugeKind, new: GaugeValue, old: GaugeValue) -> bool:
    """Whether ``new`` replaces ``old`` (strictly: an equal reading changes nothing)."""
    if kind is GaugeKind.LATEST:
        return new.order > old.order
    if kind is GaugeKind.MAX:
        return new.value > old.value  # type: ignore[operator]  # max/min readings are numbers (decoder)
    return new.value < old.value  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class GaugeBatch:
    """A batch's gauge readings, one per key and gauge, and which messages each key's readings come from."""

    updates: Mapping[str, Mapping[GaugeSlot, GaugeValue]]
    sources: Mapping[str, frozenset[str]]
    """Key -> the ids of the messages with readings on it (reported failed if its write fails)."""

    @property
    def slot_count(self) -> int:
        return sum(len(slots) for slots in self.updates.values())


def batch_gauges(messages: Iterable[Message]) -> GaugeBatch:
    """The one reading per (key, kind, name) that the batch's messages leave: max of maxes, min of mins,
    the latest by ``latest_order``. Gauges live on a key's all-time item (hot-key shards and windows
    carry none)."""
    updates: dict[str, dict[GaugeSlot, GaugeValue]] = {}
    sources: dict[str, set[str]] = {}
    for message in messages:
        for event in message.events:
            if not event.gauges:
                continue
            slots = updates.setdefault(event.key, {})
            sources.setdefault(event.key, set()).add(message.message_id)
            for name, gauge in event.gauges.items():
                order = b""
                if gauge.kind is GaugeKind.LATEST:
                    assert event.ts_ms is not None  # the decoder refuses latest without ts
                    order = latest_order(event.ts_ms, message.message_id, gauge.value)
                reading = GaugeValue(gauge.value, order)
                slot = (gauge.kind, name)
                known = slots.get(slot)
                if known is None or supersedes(gauge.kind, reading, known):
                    slots[slot] = reading
    return GaugeBatch(updates, {key: frozenset(ids) for key, ids in sources.items()})


def carries_gauges(message: Message) -> bool:
    """Whether any event of the message carries a gauge reading."""
    return any(event.gauges for event in message.events)
