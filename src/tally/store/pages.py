"""The journal's pages: one apply chunk's increments, or the crossings it records, encoded compactly and exactly
(numbers as decimal text)."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import msgspec

from tally.core.items import (
    ItemKey,
    item_parts,
    make_item,
)
from tally.core.numbers import to_wire
from tally.core.thresholds import Crossing, Direction

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tally.core.aggregate import Totals


_PAGE_ENCODER = msgspec.msgpack.Encoder()


_PAGE_DECODER = msgspec.msgpack.Decoder(list[tuple[str, str, int, int | None, list[tuple[str, str]]]])


def encode_page(increments: Totals) -> bytes:
    """Compact, exact encoding of one apply chunk's increments (numbers as their decimal text)."""
    rows = []
    for item, counters in increments.items():
        parts = item_parts(item)
        values = [(name, to_wire(delta)) for name, delta in counters.items()]
        rows.append((parts.key, parts.window, parts.shard, parts.expires_at_s, values))
    return _PAGE_ENCODER.encode(rows)


def decode_page(data: bytes) -> dict[ItemKey, dict[str, Decimal]]:
    return {
        make_item(key, window, shard, expires): {name: Decimal(text) for name, text in counters}
        for key, window, shard, expires, counters in _PAGE_DECODER.decode(data)
    }


_CROSSINGS_DECODER = msgspec.msgpack.Decoder(list[tuple[str, str, str, str, str, str, str, str, int, str]])


def encode_crossings(crossings: Sequence[Crossing]) -> bytes:
    """Compact, exact encoding of a crossing page (every field of each ``Crossing``, numbers as decimal text)."""
    return _PAGE_ENCODER.encode(
        [
            (
                c.notification_id,
                c.key,
                c.counter,
                to_wire(c.level),
                str(c.direction),
                c.message_id,
                to_wire(c.value),
                to_wire(c.step_value),
                c.at_ms,
                c.window,
            )
            for c in crossings
        ]
    )


def decode_crossings(data: bytes) -> tuple[Crossing, ...]:
    return tuple(
        Crossing(
            nid, key, counter, Decimal(level), Direction(direction), mid, Decimal(value), Decimal(step), at, window
        )
        for nid, key, counter, level, direction, mid, value, step, at, window in _CROSSINGS_DECODER.decode(data)
    )
