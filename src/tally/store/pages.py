"""The journal's pages: one apply chunk's increments, or the crossings it records, encoded compactly and exactly
(numbers as decimal text).

An increments page is msgpack. Without view items it is a list of rows, one per item: ``(key, window, shard,
expires_at_s, [(counter, delta), ...])``. A page with view items is a map: ``k``, the other items' rows as before,
and ``v``, one group per (view, key) the page touches, ``(view, key, counters, rows)``. A view's items share what
their events share: the view and the key, and the counter names (the events' counters, and the open windows'
counters riding on each item, ``\x1fh#2026-12-02T08:00Z\x1fcalls``), so a group writes them once and each of its
rows names its item by its values alone (joined by U+001F, which no value holds, as in its sort key) and each
counter by its place in ``counters``: ``(values, window, shard, expires_at_s, [(counter index, delta), ...])``.
Pages are billed per KB (``BatchWriteItem``): a view item's row is a third of a published key's that counts the
same thing (``api/customer=acme`` and its three counter names). Both shapes decode (a page written before view
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


ViewRow: TypeAlias = tuple[str, str, int, int | None, list[tuple[int, str]]]
"""One view item's increments: (its values; window; shard; expiry; [(its group's counter index, delta), ...])."""
ViewGroup: TypeAlias = tuple[str, str, list[str], list[ViewRow]]
"""A view's items on a page: (view, key, the counter names its rows index, its rows)."""


class _ViewPage(msgspec.Struct, frozen=True, omit_defaults=True):
    """A page with view items (see the module): the other items' rows, and the view items' rows per (view, key)."""

    k: list[Row] = msgspec.field(default_factory=list)
    v: list[ViewGroup] = msgspec.field(default_factory=list)


_PAGE_DECODER = msgspec.msgpack.Decoder(list[Row] | _ViewPage)


def encode_page(increments: Totals) -> bytes:
    """Compact, exact encoding of one apply chunk's increments (numbers as their decimal text)."""
    rows: list[Row] = []
    groups: dict[tuple[str, str], tuple[dict[str, int], list[ViewRow]]] = {}
    for item, counters in increments.items():
        parts = item_parts(item)
        view = view_parts(parts.key)
        if view is None:
            deltas = [(name, to_wire(delta)) for name, delta in counters.items()]
            rows.append((parts.key, parts.window, parts.shard, parts.expires_at_s, deltas))
            continue
        names, members = groups.setdefault((view.view, view.key), ({}, []))
        indexed = [(names.setdefault(name, len(names)), to_wire(delta)) for name, delta in counters.items()]
        members.append((VIEW_MARK.join(view.values), parts.window, parts.shard, parts.expires_at_s, indexed))
    if not groups:
        return _PAGE_ENCODER.encode(rows)
    views = [(view, key, list(names), members) for (view, key), (names, members) in groups.items()]
    return _PAGE_ENCODER.encode(_ViewPage(rows, views))


def page_bytes(increments: Totals) -> int:
    """A journal page's data as it is stored: what the planner and the cost model price a page by."""
    return len(encode_page(increments))


def decode_page(data: bytes) -> dict[ItemKey, dict[str, Decimal]]:
    page = _PAGE_DECODER.decode(data)
    if isinstance(page, list):
        return _items(page)
    items = _items(page.k)
    for view, key, names, members in page.v:
        for values, window, shard, expires, indexed in members:
            item = make_item(view_item_key(view, key, tuple(values.split(VIEW_MARK))), window, shard, expires)
            items[item] = {names[index]: Decimal(text) for index, text in indexed}
    return items


def _items(rows: Sequence[Row]) -> dict[ItemKey, dict[str, Decimal]]:
    return {
        make_item(key, window, shard, expires): {name: Decimal(text) for name, text in counters}
        for key, window, shard, expires, counters in rows
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
