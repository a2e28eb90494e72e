"""``CounterReader``: the one read path of tally's counters, for applications, the CLI and the HTTP endpoint.

Every read of a counter goes through here (``tally get``/``top``, the read endpoint, the counter store's
``read_counters``/``read_series``, which delegate): a hot key's shard items are summed, always all
``MAX_SHARDS`` of them (so a changed shard count never hides or doubles anything), in the exact decimal
context (``tally.core.numbers.EXACT``: Python's default context would round a sum to 28 digits). Reads are
strongly consistent: a count read right after a batch committed includes it.

Which DynamoDB calls, and so which IAM actions (``ReaderPolicy`` in template.yaml grants exactly these):

- ``get`` and ``get_many``: ``BatchGetItem``, one per 100 items (a hot key is 16 items), the keys
  DynamoDB leaves unprocessed asked again (``tally.store.requests.batch_get``); they read the key items'
  all-time attributes only, which window moves never touch, so one read of each item is exact;
- ``series``: one ``Query`` per partition (one, or 16 for a hot key) over the sort-key range of the
  windows, paginated; for hour and day windows, also a ``BatchGetItem`` of the key's item(s), whose ``w#``
  attributes hold the windows not yet moved off them, before the queries and again after them (a window
  move committing between the requests makes the read start over: ``_series_beside_moves``), and for hours
  one more ``Query`` per partition over the days they fall in, whose items keep ended hours as ``w#``
  attributes;
- ``states``: everything of some keys at once (what ``tally audit`` compares): a ``BatchGetItem`` of their key
  items, one ``Query`` per partition over all its items (paginated), and the key items again, the read
  starting over for a key a window move committed on in between (as ``series``);
- ``top``: a ``Scan`` of the whole counters table (paginated): its cost grows with the table, so it is
  for operators and batch jobs, never for a page view.

It needs boto3 and msgspec (through the item schema), not the Lambda function's Powertools or tenacity:
an application embeds it as it embeds the producer library. botocore's errors are translated once, here
and in ``batch_get``, into ``tally.errors.StoreError`` (``RetryableStoreError`` for throttling).
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final

from tally.config import COUNTER_VIEWS, COUNTERS_TABLE, HOT_KEYS, WINDOW_RETENTION, WINDOWS
from tally.core.items import SHARD_SEPARATOR, make_item, view_parts
from tally.core.numbers import EXACT
from tally.core.sharding import MAX_SHARDS, HotKeys, parse_hot_keys
from tally.core.views import CounterViews, parse_counter_views
from tally.core.windows import WindowSpec, WindowUnit, parse_window_id, parse_window_spec, unit_named
from tally.errors import ConfigurationError, InvalidReadError, RetryableStoreError
from tally.reader.requests import MAX_SERIES_WINDOWS, check_key, default_bounds, series_starts, window_unit
from tally.reader.results import Counters, KeyState, OperatorRecord, Ranked, Series, Window
from tally.reader.views import ViewGroup, parse_view, read_view
from tally.store.requests import batch_get, query_pages, scan_all_time_items
from tally.store.schema import (
    ALL_TIME,
    PARTITION_KEY,
    SORT_KEY,
    WINDOW_MOVES,
    counter_item_of,
    counters_from_item,
    distinct_from_item,
    gauges_from_item,
    item_key,
    open_windows_from_item,
    operators_from_item,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from mypy_boto3_dynamodb.client import DynamoDBClient

_ZERO: Final = Decimal(0)
MAX_SERIES_ATTEMPTS: Final = 5
"""Reads of a series a window move may interrupt before the read fails as retryable (``series``)."""


def key_of_partition(partition_key: str) -> str:
    """The counter key of an item's partition key (a shard item's ``<key>\\x1f<n>`` -> ``<key>``)."""
    return partition_key.split(SHARD_SEPARATOR, 1)[0]


def add_into(total: dict[str, Decimal], counters: Mapping[str, Decimal]) -> None:
    """Add ``counters`` to ``total`` in ``EXACT``: 16 shards of 38 digits read back as DynamoDB keeps them."""
    for name, value in counters.items():
        total[name] = EXACT.add(total.get(name, _ZERO), value)


def largest(totals: Mapping[str, Mapping[str, Decimal]], n: int, counter: str | None = None) -> list[Ranked]:
    """The ``n`` largest counters (of one name, if given), largest first; ties in key, then name, order."""
    ranked = [
        Ranked(key, name, value)
        for key, counters in totals.items()
        for name, value in counters.items()
        if counter is None or name == counter
    ]
    ranked.sort(key=lambda row: (-row.value, row.key, row.counter))
    return ranked[:n]


def _kept(unit: WindowUnit, start_ms: int, now_ms: int) -> bool:
    """Whether a window is still within its retention: one past it reads as empty, whether TTL has deleted
    its item yet (AWS: typically within 2 days) or its counters still wait on the key's item."""
    expires = unit.expires_at_s(start_ms)
    return expires is None or expires * 1000 > now_ms


def _moves_of(items: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Key item -> how many window moves it has had (``WINDOW_MOVES``; an item without it: none)."""
    return {item[PARTITION_KEY]["S"]: int(item.get(WINDOW_MOVES, {}).get("N", "0")) for item in items}


def _moves_by_item(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
    """All-time item (partition, sort key) -> how many window moves it has had (a view's items share a partition)."""
    return {
        (item[PARTITION_KEY]["S"], item[SORT_KEY]["S"]): int(item.get(WINDOW_MOVES, {}).get("N", "0")) for item in items
    }


def _add_open(found: dict[str, dict[str, Decimal]], item: Mapping[str, Any], wanted: set[str]) -> None:
    """Add the ``w#`` windows of ``item`` that are ``wanted`` into ``found``."""
    for window_id, counters in open_windows_from_item(item).items():
        if window_id in wanted:
            add_into(found.setdefault(window_id, {}), counters)


class CounterReader:
    """Reads the counters table of one deployment.

    ``hot_keys`` and ``windows`` are the deployment's ``HotKeys`` and ``Windows`` parameters (a
    ``HotKeys``/``WindowSpec`` or their text): which keys are spread over shard items, and which windows
    are counted (a series of another window is refused rather than answered with zeros; without
    ``windows`` any of minute, hour, day, month may be asked for); ``views`` its ``CounterViews`` (which
    ``HotKeys`` view patterns name, and which view holds a dimension's values). The client is built when none
    is given.
    """

    def __init__(
        self,
        counters_table: str,
        *,
        client: DynamoDBClient | None = None,
        hot_keys: HotKeys | str = "",
        windows: WindowSpec | str | None = None,
        max_series_windows: int = MAX_SERIES_WINDOWS,
        views: CounterViews | str = "",
    ) -> None:
        if not counters_table:
            raise ConfigurationError("the counters table's name is empty")
        self.counters_table = counters_table
        self.client: DynamoDBClient = client if client is not None else _default_client()
        self.views = parse_counter_views(views) if isinstance(views, str) else views
        self.hot_keys = parse_hot_keys(hot_keys, self.views) if isinstance(hot_keys, str) else hot_keys
        self.windows = parse_window_spec(windows) if isinstance(windows, str) else windows
        self.max_series_windows = max_series_windows

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, *, client: DynamoDBClient | None = None
    ) -> CounterReader:
        """From the variables the template gives its functions (and ``tally stack --env`` prints):
        ``TALLY_COUNTERS_TABLE``, ``TALLY_HOT_KEYS``, ``TALLY_WINDOWS`` (with ``TALLY_WINDOW_RETENTION``, past
        which a window reads empty), ``TALLY_COUNTER_VIEWS``."""
        env = os.environ if environ is None else environ
        windows = env.get(WINDOWS)
        if not env.get(COUNTERS_TABLE):
            raise ConfigurationError(f"missing environment variable(s): {COUNTERS_TABLE}")
        try:
            return cls(
                env[COUNTERS_TABLE],
                client=client,
                hot_keys=env.get(HOT_KEYS, ""),
                windows=None if windows is None else parse_window_spec(windows, env.get(WINDOW_RETENTION, "")),
                views=env.get(COUNTER_VIEWS, ""),
            )
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc

    # ------------------------------------------------------------------------------------------- reads
    def get(self, key: str) -> Counters:
        """The all-time counters of ``key``."""
        return self.get_many([key])[key]

    def get_many(self, keys: Iterable[str]) -> dict[str, Counters]:
        """The all-time counters of each key, in the order given (a key asked twice is read once)."""
        wanted = list(dict.fromkeys(check_key(key) for key in keys))
        item_keys = [
            item_key(make_item(key, shard=shard))
            for key in wanted
            for shard in (range(MAX_SHARDS) if self.hot_keys.is_hot(key) else range(1))
        ]
        totals: dict[str, dict[str, Decimal]] = {key: {} for key in wanted}
        gauges: dict[str, dict[str, dict[str, Decimal | str]]] = {}
        operators: dict[str, dict[str, dict[str, OperatorRecord]]] = {}
        distinct: dict[str, dict[str, Decimal]] = {key: {} for key in wanted}
        for item in batch_get(self.client, self.counters_table, item_keys):
            partition = item[PARTITION_KEY]["S"]
            add_into(totals[key_of_partition(partition)], counters_from_item(item))
            add_into(distinct[key_of_partition(partition)], distinct_from_item(item))  # a hot key's on its shards
            if partition in totals:  # gauges and operator records live on the key's own item, never a shard
                gauges[partition] = gauges_from_item(item)
                operators[partition] = {
                    kind: {name: OperatorRecord(*record) for name, record in records.items()}
                    for kind, records in operators_from_item(item).items()
                }
        return {
            key: Counters(key, totals[key], gauges.get(key, {}), distinct[key], operators.get(key, {}))
            for key in wanted
        }

    def series(
        self,
        key: str,
        window: str,
        from_ms: int | None = None,
        to_ms: int | None = None,
        *,
        now_ms: int | None = None,
    ) -> Series:
        """Every ``window`` of ``key`` from the one holding ``from_ms`` to the one holding ``to_ms``
        (epoch milliseconds; default: the 24 windows up to now), with no gaps."""
        check_key(key)
        unit = window_unit(window, self.windows)
        clock = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        start_ms, end_ms = default_bounds(unit, from_ms, to_ms, clock)
        starts = series_starts(unit, start_ms, end_ms, self.max_series_windows)
        shards = range(MAX_SHARDS) if self.hot_keys.is_hot(key) else range(1)
        key_items = [item_key(make_item(key, shard=shard)) for shard in shards]
        partitions = [key_item[PARTITION_KEY] for key_item in key_items]
        if unit.on_key_item:
            found, members = self._series_beside_moves(unit, starts, partitions, key_items)
        else:  # minute windows: window items only, which nothing moves
            found, members = self._window_items(partitions, unit.window_id(starts[0]), unit.window_id(starts[-1]))
        windows = tuple(
            Window(start, found.get(unit.window_id(start), {}), members.get(unit.window_id(start), {}))
            if _kept(unit, start, clock)
            else Window(start, {}, {})
            for start in starts
        )
        return Series(key, unit.name, windows)

    def _window_items(
        self, partitions: Sequence[Mapping[str, Any]], first: str, last: str
    ) -> tuple[dict[str, dict[str, Decimal]], dict[str, dict[str, Decimal]]]:
        """Window id -> counters, and -> distinct counts, of the window items from ``first`` to ``last``."""
        found: dict[str, dict[str, Decimal]] = {}
        members: dict[str, dict[str, Decimal]] = {}
        for partition in partitions:
            for item in self._query(partition, first, last):
                add_into(found.setdefault(item[SORT_KEY]["S"], {}), counters_from_item(item))
                add_into(members.setdefault(item[SORT_KEY]["S"], {}), distinct_from_item(item))
        return found, members

    def _series_beside_moves(
        self,
        unit: WindowUnit,
        starts: Sequence[int],
        partitions: Sequence[Mapping[str, Any]],
        key_items: Sequence[Mapping[str, Any]],
    ) -> tuple[dict[str, dict[str, Decimal]], dict[str, dict[str, Decimal]]]:
        """The windows of a unit counted on the key's item(s): what moved to window items plus what is still
        on the key items, exact whatever moves commit during the read.

        A move takes a window's attributes off a key item and adds them to a window item in one transaction
        (``tally.store.windows``), and adds 1 to the key item's ``moves``. The window items and the key items
        take several requests to read; a move committing between them would make its windows count zero
        times (the window items read before it, the key item after) or twice (the other way round). So the
        key items' ``moves`` are read first (``BatchGetItem``), then the window items (``Query`` per
        partition, and for hours the days they fall in, whose items keep ended hours), then the key items
        again: if no key item's ``moves`` changed, no move committed on any of them during the read, so the
        window items read are what they are at the second key read (only moves write them: a batch counts
        these windows on key items), and the sum of the two is each shard's value at that instant. Otherwise
        the read starts over, at most ``MAX_SERIES_ATTEMPTS`` times (a key's windows move about once a day,
        each move one transaction), then fails as retryable (the endpoint's 503).

        Chosen over one ``TransactGetItems``: that needs each item's exact key (hour items and day items,
        16 of each per hot key), at most 100 of them, and costs two read units per item, where the key
        items' second read costs one per key item and one request.
        """
        day = unit_named("day")
        first_day, last_day = day.window_id(day.start_ms(starts[0])), day.window_id(day.start_ms(starts[-1]))
        first, last = unit.window_id(starts[0]), unit.window_id(starts[-1])
        wanted = {unit.window_id(start) for start in starts}
        for _ in range(MAX_SERIES_ATTEMPTS):
            before = _moves_of(batch_get(self.client, self.counters_table, key_items))
            found, members = self._window_items(partitions, first, last)
            if unit.name == "hour":  # ended hours kept on their day's item as ``w#`` attributes
                for partition in partitions:
                    for item in self._query(partition, first_day, last_day):
                        _add_open(found, item, wanted)
            holders = batch_get(self.client, self.counters_table, key_items)
            if _moves_of(holders) == before:
                for item in holders:
                    _add_open(found, item, wanted)
                return found, members
        raise RetryableStoreError(f"window moves kept committing during {MAX_SERIES_ATTEMPTS} reads of a series")

    def states(self, keys: Iterable[str], *, now_ms: int | None = None) -> dict[str, KeyState]:
        """Everything the table holds for each key (all-time counters, every window, gauges, distinct counts),
        exact whatever window moves commit during the read, in the order given. A key may be a view item's
        (``tally.core.items.view_item_key``: what the audit recounts of a view).

        The key items are read (``BatchGetItem``), then every item of each key's partitions (one ``Query``
        each, paginated: window items, day items with their ended hours; a view's partition once for all its
        values asked for), then the key items again; a key whose ``moves`` changed in between is read again (see
        ``_series_beside_moves``), at most ``MAX_SERIES_ATTEMPTS`` times. A window past its retention
        (``windows`` known) reads as absent.
        """
        wanted = list(dict.fromkeys(key if view_parts(key) else check_key(key) for key in keys))
        clock = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        found: dict[str, KeyState] = {}
        left = wanted
        for _ in range(MAX_SERIES_ATTEMPTS):
            read, left = self._states_once(left, clock)
            found.update(read)
            if not left:
                return {key: found[key] for key in wanted}
        raise RetryableStoreError(f"window moves kept committing during {MAX_SERIES_ATTEMPTS} reads of {left[:3]}...")

    def _states_once(self, keys: Sequence[str], now_ms: int) -> tuple[dict[str, KeyState], list[str]]:
        """The states of ``keys`` no move committed on during the read, and the keys to read again."""
        homes = {key: self._homes(key) for key in keys}
        key_items = [home for held in homes.values() for home in held]
        before = _moves_by_item(batch_get(self.client, self.counters_table, key_items))
        windows: dict[str, dict[str, dict[str, Decimal]]] = {key: {} for key in keys}
        distinct: dict[str, dict[str, dict[str, Decimal]]] = {key: {} for key in keys}
        partitions = dict.fromkeys(home[PARTITION_KEY]["S"] for home in key_items)
        for partition in partitions:
            for item in self._partition_items(partition):
                owner = counter_item_of(item)
                if owner.window == ALL_TIME or owner.key not in windows:  # a view's all-time item; a value not asked
                    continue
                add_into(windows[owner.key].setdefault(owner.window, {}), counters_from_item(item))
                add_into(distinct[owner.key].setdefault(owner.window, {}), distinct_from_item(item))
                for ended, counters in open_windows_from_item(item).items():  # a day item's ended hours
                    add_into(windows[owner.key].setdefault(ended, {}), counters)
        holders = batch_get(self.client, self.counters_table, key_items)
        moved = {held for held, moves in _moves_by_item(holders).items() if before.get(held) != moves}
        totals: dict[str, dict[str, Decimal]] = {key: {} for key in keys}
        gauges: dict[str, dict[str, dict[str, Decimal | str]]] = {}
        for item in holders:
            owner = counter_item_of(item)
            key = owner.key
            add_into(totals[key], counters_from_item(item))
            add_into(distinct[key].setdefault(ALL_TIME, {}), distinct_from_item(item))
            for window, counters in open_windows_from_item(item).items():
                add_into(windows[key].setdefault(window, {}), counters)
            if owner.shard == 0:
                gauges[key] = gauges_from_item(item)
        again = [
            key for key in keys if any((home[PARTITION_KEY]["S"], home[SORT_KEY]["S"]) in moved for home in homes[key])
        ]
        states = {
            key: KeyState(
                key,
                totals[key],
                {
                    window: values
                    for window, values in windows[key].items()
                    if values and self._within_retention(window, now_ms)
                },
                gauges.get(key, {}),
                {
                    window: sets
                    for window, sets in distinct[key].items()
                    if sets and self._within_retention(window, now_ms)
                },
            )
            for key in keys
            if key not in again
        }
        return states, again

    def _homes(self, key: str) -> list[dict[str, Any]]:
        """The primary keys of ``key``'s all-time items: the key's (or a view item's), and a hot one's shards'."""
        shards = range(MAX_SHARDS) if self.hot_keys.is_hot(key) else range(1)
        return [item_key(make_item(key, shard=shard)) for shard in shards]

    def _within_retention(self, window: str, now_ms: int) -> bool:
        """Whether a window id (or ``all``) is still within the retention of its unit, when the windows are
        known; a unit the deployment does not count (any more) is kept: what it holds is stored."""
        if window == ALL_TIME or self.windows is None:
            return True
        try:
            name, start = parse_window_id(window)
        except ValueError:
            return True
        counted = [unit for unit in self.windows.units if unit.name == name]
        return not counted or _kept(counted[0], start, now_ms)

    def group(
        self, key: str, by: str | Iterable[str], window: str | None = None, at_ms: int | None = None
    ) -> ViewGroup:
        """Every value of ``key``'s view ``by`` (``customer``, ``customer+route``) in the ``window`` (minute, hour,
        day, month) holding ``at_ms`` (default: now), or all-time without ``window``: ``Query``s of the view's item
        collection, never a scan (``tally.reader.views``)."""
        view = parse_view(by)
        clock = time.time_ns() // 1_000_000
        unit = None if window is None else window_unit(window, self.windows)
        return read_view(
            self.client,
            self.counters_table,
            key,
            view,
            unit=unit,
            start_ms=None if unit is None else unit.start_ms(clock if at_ms is None else at_ms),
            hot_keys=self.hot_keys,
            windows=self.windows,
            now_ms=clock,
        )

    def values(self, key: str, dim: str, window: str | None = None, at_ms: int | None = None) -> list[str]:
        """The values of dimension ``dim`` counted for ``key`` in a window (or all-time): read from the smallest
        declared view of ``key`` holding ``dim`` (the view of ``dim`` alone without ``views``)."""
        view = parse_view(dim)
        rule = self.views.rule_for(key)
        if rule is not None:
            holding = [candidate for candidate in rule.views if dim in candidate.dims]
            if not holding:
                raise InvalidReadError(f"no view of {key!r} has the dimension {dim!r}")
            view = min(holding, key=lambda candidate: len(candidate.dims))
        return self.group(key, view.dims, window, at_ms).values(dim)

    def top(self, n: int = 10, counter: str | None = None) -> list[Ranked]:
        """The ``n`` largest all-time counters (of one name, if given): a ``Scan`` of the whole table."""
        if n < 1:
            raise InvalidReadError("top needs n >= 1")
        return largest(self.all_time_totals(), n, counter)

    def all_time_totals(self, *, views: bool = False) -> dict[str, dict[str, Decimal]]:
        """Every key's all-time counters, shards summed (a ``Scan``; window items are read and skipped); with
        ``views``, every view item's too, under its key (``tally.core.items.view_item_key``)."""
        totals: dict[str, dict[str, Decimal]] = {}
        for item in scan_all_time_items(self.client, self.counters_table, views=views):
            add_into(totals.setdefault(counter_item_of(item).key, {}), counters_from_item(item))
        return totals

    # ----------------------------------------------------------------------------------------- DynamoDB
    def _query(self, partition: Mapping[str, Any], first: str, last: str) -> Iterator[Mapping[str, Any]]:
        return self._paginate(
            {
                "TableName": self.counters_table,
                "KeyConditionExpression": "#pk = :pk AND #sk BETWEEN :first AND :last",
                "ExpressionAttributeNames": {"#pk": PARTITION_KEY, "#sk": SORT_KEY},
                "ExpressionAttributeValues": {":pk": partition, ":first": {"S": first}, ":last": {"S": last}},
                "ConsistentRead": True,
            }
        )

    def _partition_items(self, partition: str) -> Iterator[Mapping[str, Any]]:
        """Every item of a partition but its key item (``sk = all``, read apart: ``states``)."""
        items = self._paginate(
            {
                "TableName": self.counters_table,
                "KeyConditionExpression": "#pk = :pk",
                "ExpressionAttributeNames": {"#pk": PARTITION_KEY},
                "ExpressionAttributeValues": {":pk": {"S": partition}},
                "ConsistentRead": True,
            }
        )
        return (item for item in items if item[SORT_KEY]["S"] != ALL_TIME)

    def _paginate(self, kwargs: dict[str, Any]) -> Iterator[Mapping[str, Any]]:
        return query_pages(self.client, kwargs)


def _default_client() -> DynamoDBClient:
    """boto3's default client, imported only when no client is given (the CLI gives its own: importing boto3
    costs a command more than its work)."""
    import boto3  # noqa: PLC0415 - only without a client of the caller's

    return boto3.client("dynamodb")
