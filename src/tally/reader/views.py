"""Reads by dimension: every value of a view in a window (group-by), its top N, the values seen.

A view's items are one item collection per key and view (``tally.store.schema.VIEW_PARTITION_MARK``): partition
``<key>\\x1fv\\x1f<view>``, sort key ``<window>\\x1f<values>``. So one ``Query`` on a window's prefix lists every value
counted in it, and no read ever scans the table. What a read costs grows with the values it lists: the all-time
values of the view for any window counted on the items themselves (hour, day, month: open windows ride on the
all-time items until a move takes them to window items), the window's own values besides.

Exact like ``series``: an ended hour, day or month sits either on a value's all-time item (a ``w#`` attribute) or
on its window item (for hours, maybe as a ``w#`` attribute of its day's item), never both, and a move takes it from
one to the other in one transaction that adds 1 to the all-time item's ``moves``. So the all-time items are read
first, then the window items, then the all-time items again: when no value's ``moves`` changed, no move committed
in between and the sum of the two reads is each value's value at that instant; otherwise the read starts over, at
most ``MAX_SERIES_ATTEMPTS`` times, then fails as retryable. A hot view (``HotKeys``: ``api[customer]=8``) is read
in all ``MAX_SHARDS`` partitions and summed per value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from tally.core.items import ALL_TIME, VIEW_MARK
from tally.core.numbers import EXACT
from tally.core.patterns import KeyPattern
from tally.core.sharding import MAX_SHARDS
from tally.core.views import View, is_dimension_name
from tally.core.windows import hours_on_day_items, unit_named
from tally.errors import InvalidReadError, RetryableStoreError
from tally.reader.requests import check_key
from tally.store.requests import query_pages
from tally.store.schema import (
    PARTITION_KEY,
    SORT_KEY,
    WINDOW_MOVES,
    counters_from_item,
    open_windows_from_item,
    view_partition,
    view_window_prefix,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient

    from tally.core.sharding import HotKeys
    from tally.core.windows import WindowSpec, WindowUnit

MAX_VIEW_READ_ATTEMPTS: Final = 5
"""Reads of a window a move may interrupt before the read fails as retryable."""
_ZERO: Final = Decimal(0)


@dataclass(frozen=True, slots=True)
class ViewRow:
    """One value of a view (a combination of its dimensions' values) and its counters."""

    dims: Mapping[str, str]
    counters: Mapping[str, Decimal]

    def value(self, counter: str = "count") -> Decimal:
        return self.counters.get(counter, _ZERO)


@dataclass(frozen=True, slots=True)
class ViewGroup:
    """Every value of ``view`` of ``key`` counted in one window (``window`` ``all``: all-time), by value."""

    key: str
    view: str
    window: str
    """``all``, or the unit (``minute``, ``hour``, ``day``, ``month``)."""
    start_ms: int | None
    """The window's start; None for all-time."""
    rows: tuple[ViewRow, ...] = field(default_factory=tuple)

    def top(self, n: int, counter: str = "count") -> list[ViewRow]:
        """The ``n`` values with the largest ``counter``, largest first; ties in value order."""
        if n < 1:
            raise InvalidReadError("top needs n >= 1")
        ranked = [row for row in self.rows if counter in row.counters]
        ranked.sort(key=lambda row: -row.value(counter))  # stable: rows are in value order
        return ranked[:n]

    def values(self, dim: str) -> list[str]:
        """The values of ``dim`` seen in this window, sorted."""
        if dim not in self.view.split("+"):
            raise InvalidReadError(f"view {self.view} has no dimension {dim!r}")
        return sorted({row.dims[dim] for row in self.rows})


def parse_view(spelled: str | Iterable[str]) -> View:
    """``customer+route``, ``customer,route`` or a list of names -> the ``View``; ``InvalidReadError`` if malformed."""
    names = spelled.replace("+", ",").split(",") if isinstance(spelled, str) else list(spelled)
    names = [name.strip() for name in names]
    if not names or not all(is_dimension_name(name) for name in names) or len(set(names)) != len(names):
        raise InvalidReadError(f"{spelled!r} is not a view: dimension names (A-Z a-z 0-9 _ -) joined by + or ,")
    return View.of(names)


def view_is_hot(hot_keys: HotKeys, key: str, view: View) -> bool:
    """Whether some item of ``key``'s ``view`` may be spread over shards (then every shard partition is read)."""
    every = VIEW_MARK + view.name + VIEW_MARK + key + VIEW_MARK + "*"
    return hot_keys.overlaps(KeyPattern(every))


def read_view(
    client: DynamoDBClient,
    table: str,
    key: str,
    view: View,
    *,
    unit: WindowUnit | None,
    start_ms: int | None,
    hot_keys: HotKeys,
    windows: WindowSpec | None,
    now_ms: int,
) -> ViewGroup:
    """Every value of ``key``'s ``view`` in the ``unit`` window starting at ``start_ms`` (``unit`` None: all-time)."""
    check_key(key)
    shards = range(MAX_SHARDS) if view_is_hot(hot_keys, key, view) else range(1)
    partitions = [view_partition(key, view.name, shard) for shard in shards]
    reads = _Reads(client, table, partitions, view)
    if unit is None or start_ms is None:
        totals = reads.totals(reads.query(ALL_TIME), None)
        return ViewGroup(key, view.name, ALL_TIME, None, _rows(view, totals))
    expires = unit.expires_at_s(start_ms)
    if expires is not None and expires * 1000 <= now_ms:  # past retention: reads as empty, wherever it waits
        return ViewGroup(key, view.name, unit.name, start_ms, ())
    window = unit.window_id(start_ms)
    if not unit.on_key_item:  # minute windows: items of their own, which nothing moves
        return ViewGroup(key, view.name, unit.name, start_ms, _rows(view, reads.totals(reads.query(window), None)))
    day = unit_named("day")
    day_id = day.window_id(day.start_ms(start_ms))
    hours_on_days = unit.name == "hour" and (windows is None or hours_on_day_items(windows))
    for _ in range(MAX_VIEW_READ_ATTEMPTS):
        before = _moves(reads.query(ALL_TIME))
        found = reads.totals(reads.query(window), None)
        if hours_on_days:  # ended hours kept on their day's item as ``w#`` attributes
            _add_rows(found, reads.totals(reads.query(day_id), window))
        holders = reads.query(ALL_TIME)
        if _moves(holders) == before:
            _add_rows(found, reads.totals(holders, window))
            return ViewGroup(key, view.name, unit.name, start_ms, _rows(view, found))
    raise RetryableStoreError(f"window moves kept committing during {MAX_VIEW_READ_ATTEMPTS} reads of a view")


class _Reads:
    """The ``Query`` of a view's partitions on one window's prefix, and what its items hold."""

    def __init__(self, client: DynamoDBClient, table: str, partitions: Sequence[str], view: View) -> None:
        self.client, self.table, self.partitions, self.view = client, table, partitions, view

    def query(self, window: str) -> list[Mapping[str, Any]]:
        return [
            item
            for partition in self.partitions
            for item in _query_prefix(self.client, self.table, partition, view_window_prefix(window))
        ]

    def totals(
        self, items: Iterable[Mapping[str, Any]], open_window: str | None
    ) -> dict[tuple[str, ...], dict[str, Decimal]]:
        """Values -> counters: the items' own (``open_window`` None) or their ``w#`` attributes of that window."""
        found: dict[tuple[str, ...], dict[str, Decimal]] = {}
        for item in items:
            values = tuple(item[SORT_KEY]["S"].split(VIEW_MARK)[1:])
            counters = (
                counters_from_item(item) if open_window is None else open_windows_from_item(item).get(open_window, {})
            )
            if counters:
                _add(found.setdefault(values, {}), counters)
        return found


def _moves(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    return {
        (item[PARTITION_KEY]["S"], item[SORT_KEY]["S"]): int(item.get(WINDOW_MOVES, {}).get("N", "0")) for item in items
    }


def _add(into: dict[str, Decimal], counters: Mapping[str, Decimal]) -> None:
    for name, value in counters.items():
        into[name] = EXACT.add(into.get(name, _ZERO), value)


def _add_rows(
    into: dict[tuple[str, ...], dict[str, Decimal]], more: Mapping[tuple[str, ...], Mapping[str, Decimal]]
) -> None:
    for values, counters in more.items():
        _add(into.setdefault(values, {}), counters)


def _rows(view: View, totals: Mapping[tuple[str, ...], Mapping[str, Decimal]]) -> tuple[ViewRow, ...]:
    return tuple(
        ViewRow(dict(zip(view.dims, values, strict=True)), dict(sorted(counters.items())))
        for values, counters in sorted(totals.items())
    )


def _query_prefix(client: DynamoDBClient, table: str, partition: str, prefix: str) -> Iterator[Mapping[str, Any]]:
    """Every item of ``partition`` whose sort key begins with ``prefix``, strongly consistent, paginated."""
    return query_pages(
        client,
        {
            "TableName": table,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#sk": SORT_KEY},
            "ExpressionAttributeValues": {":pk": {"S": partition}, ":prefix": {"S": prefix}},
            "ConsistentRead": True,
        },
    )
