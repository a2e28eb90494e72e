"""The journal's pages: one apply chunk's increments, or the crossings it records, encoded compactly and exactly
(numbers as decimal text).

An increments page is a msgpack array ``[3, layout]``, ``layout`` the zlib-compressed msgpack array ``[names, rows,
groups]``: ``names`` lists the page's counter names once each; ``rows`` holds a row per item, ``(key, window, shard,
expires_at_s, [name index, ...], [delta, ...])``; ``groups`` one per (view, key) the page touches, ``(view, key,
rows)``, whose rows name their item by its values alone (joined by U+001F, which no value holds, as in its sort
key): ``(values, window, shard, expires_at_s, [name index, ...], [delta, ...])``. The leading number is what code
written before this shape cannot read past: it fails on such a page (``[2, ...]`` and earlier decoders want other
arrays) rather than finishing a batch from a page it would read as empty, so during a deploy, or after a rollback,
only this code finishes a batch this code left.

Pages are billed per KB (``BatchWriteItem``), and a batch's items share most of their counter names: the
events' counters, and the open windows' counters riding on each key item (``\x1fh#2026-12-02T08:00Z\x1fcalls``,
25 bytes and more), the same for every key of the hour. Written once a page, a name costs each row one byte: a
key with two counters and hour and day windows takes 65 bytes instead of 167. A view's items share their view and
key too, so a group writes them once and a row names its item by its values. What is left repeats as well (keys
of one prefix, a key's all-time delta again in each of its windows, small numbers), which zlib takes out: a batch
of 700 packed messages of workload U with hour and day windows, 67,255 bytes of layout, is a page of 10,911
(``PAGE_COMPRESSION``).

Pages written before still decode: ``[2, names, rows, groups]`` (the same layout, not compressed); a list of rows
with their counter names ``(key, window, shard, expires_at_s, [(counter, delta), ...])``; or, with view items, a
map of such rows (``k``) and of groups carrying their own names (``v``: ``(view, key, counters, [(values, window,
shard, expires_at_s, [(counter index, delta), ...]), ...])``). A journal batch another container left may hold any.
"""

from __future__ import annotations

import zlib
from decimal import Decimal
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

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


NamedRow: TypeAlias = tuple[str, str, int, int | None, list[int], list[str]]
"""One item's increments: (its key, or a view item's values; window; shard; expiry; its counters' places in the
page's names; their deltas, in the same order)."""
NamedGroup: TypeAlias = tuple[str, str, list[NamedRow]]
"""A view's items on a page: (view, key, their rows)."""

Row: TypeAlias = tuple[str, str, int, int | None, list[tuple[str, str]]]
"""A row of a page written before names were listed once: (key; window; shard; expiry; [(counter, delta), ...])."""
ViewRow: TypeAlias = tuple[str, str, int, int | None, list[tuple[int, str]]]
"""A view item's row of such a page: (values; window; shard; expiry; [(its group's counter index, delta), ...])."""
ViewGroup: TypeAlias = tuple[str, str, list[str], list[ViewRow]]
"""A view's items on such a page: (view, key, the counter names its rows index, its rows)."""


COMPRESSED: Final = 3
"""The first element of a page whose layout is compressed."""
PAGE_COMPRESSION: Final = 6
"""zlib's level for a page's layout (its default). Level 1 leaves a third more bytes on the page above (14,354 against
10,906) for a fifth of the CPU (0.3 ms against 1.5 ms): the 4 write units level 6 saves there cost about 300 times
the 1.2 ms of Lambda it spends (US$ 2.5e-6 on demand, against 8e-9 at 512 MB, ``tally.cost.model.Prices``)."""
_COMPRESSED_DECODER = msgspec.msgpack.Decoder(tuple[Literal[3], bytes])
_LAYOUT_DECODER = msgspec.msgpack.Decoder(tuple[list[str], list[NamedRow], list[NamedGroup]])
_NAMED_DECODER = msgspec.msgpack.Decoder(tuple[Literal[2], list[str], list[NamedRow], list[NamedGroup]])
"""A page that lists its counter names once, not compressed (written 2026-12-04, before compression)."""


class _ViewPage(msgspec.Struct, frozen=True, omit_defaults=True):
    """A page with view items written before names were listed once (see the module): rows (``k``), groups (``v``)."""

    k: list[Row] = msgspec.field(default_factory=list)
    v: list[ViewGroup] = msgspec.field(default_factory=list)


_EARLIER_DECODER = msgspec.msgpack.Decoder(list[Row] | _ViewPage)


def encode_page(increments: Totals) -> bytes:
    """Compact, exact encoding of one apply chunk's increments (numbers as their decimal text)."""
    names: dict[str, int] = {}
    rows: list[NamedRow] = []
    groups: dict[tuple[str, str], list[NamedRow]] = {}
    for item, counters in increments.items():
        places = [names.setdefault(name, len(names)) for name in counters]
        deltas = [to_wire(delta) for delta in counters.values()]
        parts = item_parts(item)
        view = view_parts(parts.key)
        if view is None:
            rows.append((parts.key, parts.window, parts.shard, parts.expires_at_s, places, deltas))
        else:
            row = (VIEW_MARK.join(view.values), parts.window, parts.shard, parts.expires_at_s, places, deltas)
            groups.setdefault((view.view, view.key), []).append(row)
    layout = _PAGE_ENCODER.encode(
        (list(names), rows, [(view, key, members) for (view, key), members in groups.items()])
    )
    return _PAGE_ENCODER.encode((COMPRESSED, zlib.compress(layout, PAGE_COMPRESSION)))


def page_bytes(increments: Totals) -> int:
    """A journal page's data as it is stored: what the planner and the cost model price a page by."""
    return len(encode_page(increments))


def decode_page(data: bytes) -> dict[ItemKey, dict[str, Decimal]]:
    try:
        _, layout = _COMPRESSED_DECODER.decode(data)
    except msgspec.ValidationError:
        try:
            _, names, rows, groups = _NAMED_DECODER.decode(data)
        except msgspec.ValidationError:
            return _earlier_page(data)
    else:
        names, rows, groups = _LAYOUT_DECODER.decode(zlib.decompress(layout))
    items = {
        make_item(key, window, shard, expires): _counters(names, places, deltas)
        for key, window, shard, expires, places, deltas in rows
    }
    for view, key, members in groups:
        for values, window, shard, expires, places, deltas in members:
            item = make_item(view_item_key(view, key, tuple(values.split(VIEW_MARK))), window, shard, expires)
            items[item] = _counters(names, places, deltas)
    return items


def _earlier_page(data: bytes) -> dict[ItemKey, dict[str, Decimal]]:
    """A page written before names were listed once: a list of rows, or a map of rows and view groups."""
    page = _EARLIER_DECODER.decode(data)
    if isinstance(page, list):
        return _items(page)
    items = _items(page.k)
    for view, key, group_names, view_rows in page.v:
        for values, window, shard, expires, indexed in view_rows:
            item = make_item(view_item_key(view, key, tuple(values.split(VIEW_MARK))), window, shard, expires)
            items[item] = {group_names[index]: Decimal(text) for index, text in indexed}
    return items


def _counters(names: Sequence[str], places: Sequence[int], deltas: Sequence[str]) -> dict[str, Decimal]:
    return {names[place]: Decimal(text) for place, text in zip(places, deltas, strict=True)}


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
