"""The journal's pages: one apply chunk's increments, or the crossings it records, encoded compactly and exactly
(numbers as decimal text).

An increments page is msgpack. Without view items it is a list of rows, one per item: ``(key, window, shard,
expires_at_s, [(counter, delta), ...])``. A page with view items is a map: ``k``, the other items' rows as before,
and ``v``, one group per (view, key) the page touches, ``(view, key, rows)``, whose rows name each item by its
values alone (joined by U+001F, which no value holds, as in its sort key): the view and the key are written once
per page instead of once per item, so a view item's entry is shorter than a published key's that counts the same
group (``api/customer=acme`` against ``acme``). Pages are billed per KB (``BatchWriteItem``), so this is what keeps a
packed batch's views cheaper than the same keys published by hand. Both shapes decode (a page written before view
groups existed is a list).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from tally.core.items import (
    VIEW_MARK,
    ItemKey,
    item_parts,
    make_item,
    view_item_key,
    view_parts,
)
from tally.core.numbers import to_wire
from tally.core.thresholds import Crossing, Direction

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tally.core.aggregate import Totals


_PAGE_ENCODER = msgspec.msgpack.Encoder()


Row: TypeAlias = tuple[str, str, int, int | None, list[tuple[str, str]]]
"""One item's increments: (its key, or a view item's values; window; shard; expiry; [(counter, delta), ...])."""


class _ViewPage(msgspec.Struct, omit_defaults=True):
    """A page with view items (see the module): the other items' rows, and the view items' rows per (view, key)."""

    k: list[Row] = msgspec.field(default_factory=list)
    v: list[tuple[str, str, list[Row]]] = msgspec.field(default_factory=list)


_PAGE_DECODER = msgspec.msgpack.Decoder(list[Row] | _ViewPage)


def encode_page(increments: Totals) -> bytes:
    """Compact, exact encoding of one apply chunk's increments (numbers as their decimal text)."""
    rows: list[Row] = []
    groups: dict[tuple[str, str], list[Row]] = {}
    for item, counters in increments.items():
        parts = item_parts(item)
        deltas = [(name, to_wire(delta)) for name, delta in counters.items()]
        view = view_parts(parts.key)
        if view is None:
            rows.append((parts.key, parts.window, parts.shard, parts.expires_at_s, deltas))
        else:
            named = VIEW_MARK.join(view.values)
            groups.setdefault((view.view, view.key), []).append(
                (named, parts.window, parts.shard, parts.expires_at_s, deltas)
            )
    if not groups:
        return _PAGE_ENCODER.encode(rows)
    return _PAGE_ENCODER.encode(_ViewPage(rows, [(view, key, members) for (view, key), members in groups.items()]))


def decode_page(data: bytes) -> dict[ItemKey, dict[str, Decimal]]:
    page = _PAGE_DECODER.decode(data)
    if isinstance(page, list):
        return _items(page)
    items = _items(page.k)
    for view, key, members in page.v:
        items.update(_items(members, (view, key)))
    return items


def _items(rows: Sequence[Row], view: tuple[str, str] | None = None) -> dict[ItemKey, dict[str, Decimal]]:
    """The items of ``rows``: each named by its key, or (``view``: its view and key) by its view item's values."""
    return {
        make_item(
            named if view is None else view_item_key(*view, tuple(named.split(VIEW_MARK))), window, shard, expires
        ): {name: Decimal(text) for name, text in counters}
        for named, window, shard, expires, counters in rows
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
